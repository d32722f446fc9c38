//! The corpus file (conformance/README.md): scenarios of steps, each step with its line.

use gpud_client::proto::parse_size;

/// One scenario: a fresh daemon and its steps.
#[derive(Debug)]
pub struct Scenario {
    pub name: String,
    pub line: usize,
    /// `--simulate` (default `1x16GiB`).
    pub simulate: String,
    /// The `config` lines, appended to gpud's config file.
    pub config: Vec<String>,
    pub steps: Vec<Step>,
}

/// One line of a scenario.
#[derive(Debug)]
pub struct Step {
    pub line: usize,
    /// The line as written, for reports.
    pub text: String,
    pub client: String,
    pub verb: Verb,
    /// The word after `->`, where the verb takes one.
    pub expect: Option<String>,
}

/// The arguments of `acquire` and `begin`. Class and device stay text: a value the client
/// library refuses is the client's `invalid_request`, found when the step runs.
#[derive(Debug, Clone, Default)]
pub struct Request {
    pub vram: u64,
    pub compute: bool,
    pub device: Option<String>,
    pub class: Option<String>,
    pub timeout_ms: Option<u64>,
    pub label: Option<String>,
    /// Host resources: memory, page-locked memory, CPUs and where (docs/HOST.md). NUMA stays
    /// text, as class and device do.
    pub host_mem: u64,
    pub pinned: u64,
    pub cpus: u32,
    pub numa: Option<String>,
}

/// What a step does.
#[derive(Debug)]
pub enum Verb {
    Acquire(String, Request),
    Begin(String, Request),
    Pending(String),
    Await(String),
    Release(String),
    /// A resize of the lease's VRAM, or with `host` of its host memory.
    Resize {
        lease: String,
        vram: u64,
        host: bool,
        timeout_ms: Option<u64>,
    },
    Check {
        lease: String,
        vram: Option<u64>,
        compute: Option<bool>,
        device: Option<u32>,
        host_mem: Option<u64>,
        pinned: Option<u64>,
        /// How many CPUs the grant names.
        cpus: Option<usize>,
        /// Their NUMA node; `Some(None)` for `none` (no CPUs).
        numa_node: Option<Option<u32>>,
    },
    Yield(String),
    Revoked(String),
    Drop,
    Status {
        leases: Option<usize>,
        waiters: Option<usize>,
        devices: Option<usize>,
    },
    Drain(String),
    Undrain(String),
    Revoke(String),
    /// A raw connection: `hello` says whether it sends a hello first.
    Raw {
        hello: bool,
        code: String,
        frame: String,
    },
    Sleep(u64),
}

/// A corpus error, with its line.
#[derive(Debug)]
pub struct ParseError {
    pub line: usize,
    pub why: String,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.why)
    }
}

/// `max` (2^64 − 1) or a size as gpud-proto reads it.
pub fn size(text: &str) -> Result<u64, String> {
    if text == "max" {
        Ok(u64::MAX)
    } else {
        parse_size(text).map_err(|e| e.to_string())
    }
}

fn yes_no(text: &str) -> Result<bool, String> {
    match text {
        "yes" => Ok(true),
        "no" => Ok(false),
        other => Err(format!("expected yes or no, not {other:?}")),
    }
}

fn number<T: std::str::FromStr>(key: &str, text: &str) -> Result<T, String> {
    text.parse()
        .map_err(|_| format!("{key}={text}: not a number"))
}

/// Splits off the first space-separated token.
fn first_token(text: &str) -> (&str, &str) {
    let text = text.trim_start();
    match text.find(' ') {
        Some(i) => (&text[..i], text[i + 1..].trim_start()),
        None => (text, ""),
    }
}

/// The `key=value` arguments of a step, checked against the keys its verb takes.
struct Args<'a> {
    pairs: Vec<(&'a str, &'a str)>,
}

impl<'a> Args<'a> {
    fn new(tokens: &[&'a str], allowed: &[&str]) -> Result<Self, String> {
        let mut pairs: Vec<(&str, &str)> = Vec::new();
        for t in tokens {
            let (k, v) = t
                .split_once('=')
                .ok_or_else(|| format!("{t:?} is not key=value"))?;
            if !allowed.contains(&k) {
                return Err(format!(
                    "unknown argument {k:?} (this verb takes {allowed:?})"
                ));
            }
            if pairs.iter().any(|(seen, _)| *seen == k) {
                return Err(format!("{k} given twice"));
            }
            pairs.push((k, v));
        }
        Ok(Self { pairs })
    }

    fn get(&self, key: &str) -> Option<&'a str> {
        self.pairs.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }

    fn request(&self) -> Result<Request, String> {
        Ok(Request {
            vram: self.get("vram").map(size).transpose()?.unwrap_or(0),
            compute: self
                .get("compute")
                .map(yes_no)
                .transpose()?
                .unwrap_or(false),
            device: self.get("device").map(String::from),
            class: self.get("class").map(String::from),
            timeout_ms: self
                .get("timeout")
                .map(|t| number("timeout", t))
                .transpose()?,
            label: self.get("label").map(String::from),
            host_mem: self.get("host_mem").map(size).transpose()?.unwrap_or(0),
            pinned: self.get("pinned").map(size).transpose()?.unwrap_or(0),
            cpus: self
                .get("cpus")
                .map(|c| number("cpus", c))
                .transpose()?
                .unwrap_or(0),
            numa: self.get("numa").map(String::from),
        })
    }
}

const REQUEST_KEYS: &[&str] = &[
    "vram", "compute", "device", "class", "timeout", "label", "host_mem", "pinned", "cpus", "numa",
];

/// Parses one step line (not a directive).
fn step(line: usize, text: &str) -> Result<Step, String> {
    let (client, rest) = first_token(text);
    let (verb, rest) = first_token(rest);
    if client.is_empty() || verb.is_empty() {
        return Err("a step is `<client> <verb> ...`".into());
    }
    if !client
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        return Err(format!("client name {client:?} is not lowercase"));
    }
    // Raw frames are the rest of the line verbatim: no `->`, no key=value.
    if verb == "raw" || verb == "rawfirst" {
        let (code, frame) = first_token(rest);
        if code.is_empty() || frame.is_empty() {
            return Err(format!("`{verb} <code> <frame text>`"));
        }
        return Ok(Step {
            line,
            text: text.to_string(),
            client: client.to_string(),
            verb: Verb::Raw {
                hello: verb == "raw",
                code: code.to_string(),
                frame: frame.to_string(),
            },
            expect: None,
        });
    }
    let mut tokens: Vec<&str> = rest.split_whitespace().collect();
    let expect = match tokens.iter().position(|t| *t == "->") {
        Some(i) => {
            if tokens.len() != i + 2 {
                return Err("`->` takes exactly one word after it".into());
            }
            let e = tokens[i + 1].to_string();
            tokens.truncate(i);
            Some(e)
        }
        None => None,
    };
    // Verbs that name a lease take it as their first word.
    let lease = |tokens: &[&str]| -> Result<String, String> {
        match tokens.first() {
            Some(t) if !t.contains('=') => Ok(t.to_string()),
            _ => Err(format!("`{verb}` needs a lease name")),
        }
    };
    let (verb, takes_expect): (Verb, bool) = match verb {
        "acquire" | "begin" => {
            let name = lease(&tokens)?;
            let request = Args::new(&tokens[1..], REQUEST_KEYS)?.request()?;
            if verb == "acquire" {
                (Verb::Acquire(name, request), true)
            } else {
                (Verb::Begin(name, request), false)
            }
        }
        "pending" | "await" | "release" | "yield" | "revoked" | "revoke" => {
            let name = lease(&tokens)?;
            Args::new(&tokens[1..], &[])?;
            match verb {
                "pending" => (Verb::Pending(name), false),
                "await" => (Verb::Await(name), true),
                "release" => (Verb::Release(name), true),
                "yield" => (Verb::Yield(name), true),
                "revoked" => (Verb::Revoked(name), true),
                _ => (Verb::Revoke(name), true),
            }
        }
        "resize" => {
            let name = lease(&tokens)?;
            let args = Args::new(&tokens[1..], &["vram", "host_mem", "timeout"])?;
            let (vram, host) = match (args.get("vram"), args.get("host_mem")) {
                (Some(v), None) => (size(v)?, false),
                (None, Some(h)) => (size(h)?, true),
                _ => return Err("resize needs vram=SIZE or host_mem=SIZE".into()),
            };
            let timeout_ms = args
                .get("timeout")
                .map(|t| number("timeout", t))
                .transpose()?;
            (
                Verb::Resize {
                    lease: name,
                    vram,
                    host,
                    timeout_ms,
                },
                true,
            )
        }
        "check" => {
            let name = lease(&tokens)?;
            let args = Args::new(
                &tokens[1..],
                &[
                    "vram",
                    "compute",
                    "device",
                    "host_mem",
                    "pinned",
                    "cpus",
                    "numa_node",
                ],
            )?;
            (
                Verb::Check {
                    lease: name,
                    vram: args.get("vram").map(size).transpose()?,
                    compute: args.get("compute").map(yes_no).transpose()?,
                    device: args
                        .get("device")
                        .map(|d| number("device", d))
                        .transpose()?,
                    host_mem: args.get("host_mem").map(size).transpose()?,
                    pinned: args.get("pinned").map(size).transpose()?,
                    cpus: args.get("cpus").map(|c| number("cpus", c)).transpose()?,
                    numa_node: args
                        .get("numa_node")
                        .map(|n| match n {
                            "none" => Ok(None),
                            n => number("numa_node", n).map(Some),
                        })
                        .transpose()?,
                },
                false,
            )
        }
        "drop" => {
            Args::new(&tokens, &[])?;
            (Verb::Drop, false)
        }
        "status" => {
            let args = Args::new(&tokens, &["leases", "waiters", "devices"])?;
            let count = |k: &str| args.get(k).map(|v| number(k, v)).transpose();
            (
                Verb::Status {
                    leases: count("leases")?,
                    waiters: count("waiters")?,
                    devices: count("devices")?,
                },
                false,
            )
        }
        "drain" | "undrain" => {
            let args = Args::new(&tokens, &["device"])?;
            let device = args
                .get("device")
                .ok_or_else(|| format!("{verb} needs device=N"))?
                .to_string();
            if verb == "drain" {
                (Verb::Drain(device), true)
            } else {
                (Verb::Undrain(device), true)
            }
        }
        "sleep" => match tokens.as_slice() {
            [ms] => (Verb::Sleep(number("sleep", ms)?), false),
            _ => return Err("`sleep <ms>`".into()),
        },
        other => return Err(format!("unknown verb {other:?}")),
    };
    match (&expect, takes_expect) {
        (None, true) => return Err("this verb needs `-> <expect>`".into()),
        (Some(_), false) => return Err("this verb takes no `->`".into()),
        _ => {}
    }
    if let (Verb::Yield(_), Some(e)) = (&verb, &expect) {
        yes_no(e)?;
    }
    if let (Verb::Revoked(_), Some(e)) = (&verb, &expect) {
        if e != "yes" {
            return Err("`revoked` expects `yes`".into());
        }
    }
    Ok(Step {
        line,
        text: text.to_string(),
        client: client.to_string(),
        verb,
        expect,
    })
}

/// Parses the whole corpus.
pub fn parse(text: &str) -> Result<Vec<Scenario>, ParseError> {
    let mut scenarios = Vec::new();
    let mut current: Option<Scenario> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let err = |why: String| ParseError { line, why };
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let (word, rest) = first_token(trimmed);
        match (word, current.as_mut()) {
            ("scenario", None) => {
                if rest.is_empty() || rest.contains(' ') {
                    return Err(err("`scenario <name>`".into()));
                }
                current = Some(Scenario {
                    name: rest.to_string(),
                    line,
                    simulate: "1x16GiB".into(),
                    config: Vec::new(),
                    steps: Vec::new(),
                });
            }
            ("scenario", Some(s)) => {
                return Err(err(format!("scenario {} has no `end`", s.name)));
            }
            (_, None) => return Err(err("outside a scenario".into())),
            ("end", Some(_)) => {
                if !rest.is_empty() {
                    return Err(err("`end` takes nothing".into()));
                }
                scenarios.extend(current.take());
            }
            ("gpud", Some(s)) => match rest.strip_prefix("simulate=") {
                Some(spec) if !spec.is_empty() && !spec.contains(' ') => {
                    s.simulate = spec.to_string();
                }
                _ => return Err(err("`gpud simulate=<SPEC>`".into())),
            },
            ("config", Some(s)) => s.config.push(rest.to_string()),
            (_, Some(s)) => s.steps.push(step(line, trimmed).map_err(err)?),
        }
    }
    match current {
        Some(s) => Err(ParseError {
            line: s.line,
            why: format!("scenario {} has no `end`", s.name),
        }),
        None => Ok(scenarios),
    }
}

#[test]
fn the_parser_reads_every_verb_and_refuses_mistakes() {
    let corpus = "\
# comment
scenario one
gpud simulate=2x8GiB
config limits.max_leases_per_session = 1
a acquire l1 vram=max compute=yes device=0 class=high timeout=5 label=x_y -> granted
a check l1 vram=1KiB compute=no device=1
x raw bad_frame {\"a\": 1} -> stays text
a sleep 10
end
";
    let s = parse(corpus).unwrap();
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].simulate, "2x8GiB");
    assert_eq!(s[0].config, ["limits.max_leases_per_session = 1"]);
    assert_eq!(s[0].steps.len(), 4);
    match &s[0].steps[0].verb {
        Verb::Acquire(name, r) => {
            assert_eq!(name, "l1");
            assert_eq!(r.vram, u64::MAX);
            assert!(r.compute);
            assert_eq!(r.timeout_ms, Some(5));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(s[0].steps[0].line, 5);
    match &s[0].steps[2].verb {
        Verb::Raw { hello, code, frame } => {
            assert!(*hello);
            assert_eq!(code, "bad_frame");
            assert_eq!(frame, "{\"a\": 1} -> stays text");
        }
        other => panic!("{other:?}"),
    }
    for bad in [
        "scenario s\na acquire l1 vram=1GiB\nend\n",
        "scenario s\na pending l1 -> granted\nend\n",
        "scenario s\na acquire l1 size=1GiB -> granted\nend\n",
        "scenario s\na frobnicate l1\nend\n",
        "scenario s\na acquire l1 vram=1GiB -> granted\n",
        "a acquire l1 -> granted\n",
        "scenario s\na yield l1 -> maybe\nend\n",
        "scenario s\na resize l1 -> ok\nend\n",
        "scenario s\na resize l1 vram=1 host_mem=1 -> ok\nend\n",
        "scenario s\na check l1 numa_node=far\nend\n",
    ] {
        assert!(parse(bad).is_err(), "{bad:?} was accepted");
    }
}

#[test]
fn the_parser_reads_host_resources() {
    let corpus = "\
scenario host
a acquire l1 host_mem=4GiB pinned=1GiB cpus=2 numa=near -> granted
a resize l1 host_mem=8GiB timeout=5 -> ok
a check l1 host_mem=8GiB pinned=1GiB cpus=2 numa_node=none
end
";
    let s = parse(corpus).unwrap();
    match &s[0].steps[0].verb {
        Verb::Acquire(_, r) => {
            assert_eq!((r.host_mem, r.pinned, r.cpus), (4 << 30, 1 << 30, 2));
            assert_eq!(r.numa.as_deref(), Some("near"));
        }
        other => panic!("{other:?}"),
    }
    match &s[0].steps[1].verb {
        Verb::Resize { vram, host, .. } => assert_eq!((*vram, *host), (8 << 30, true)),
        other => panic!("{other:?}"),
    }
    match &s[0].steps[2].verb {
        Verb::Check {
            host_mem,
            cpus,
            numa_node,
            ..
        } => assert_eq!(
            (*host_mem, *cpus, *numa_node),
            (Some(8 << 30), Some(2), Some(None))
        ),
        other => panic!("{other:?}"),
    }
}
