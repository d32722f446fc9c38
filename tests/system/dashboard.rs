//! The Grafana dashboard (`dashboards/gpud.json`) queries only metrics that gpud exports: every
//! metric name in its PromQL expressions appears in `gpudctl metrics` of a real gpud.

use std::collections::BTreeSet;

use gpud_tests::Daemon;
use gpud_tests::ops::repo_root_dir;
use serde_json::Value;

/// PromQL words that are not metric names: binary operators, modifiers, the literals a number
/// may be written as, and the aggregation operators (`sum by (x) (...)` puts no `(` right after
/// `sum`).
const KEYWORDS: &[&str] = &[
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "atan2",
    "inf",
    "nan",
    "Inf",
    "NaN",
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];

/// Modifiers followed by a parenthesized list of label names (not metric names).
const LABEL_LISTS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// The metric names a PromQL expression reads: identifiers outside label matchers, ranges,
/// strings and label lists that are not functions (followed by `(`) or keywords.
fn promql_metric_names(expr: &str) -> BTreeSet<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    // Index just past the closing `close` that matches the opener at `i`, skipping strings.
    let skip_group = |mut i: usize, close: char| -> usize {
        i += 1;
        while i < chars.len() && chars[i] != close {
            if matches!(chars[i], '"' | '\'' | '`') {
                i = skip_string(&chars, i);
            } else {
                i += 1;
            }
        }
        i + 1
    };
    while i < chars.len() {
        let c = chars[i];
        if matches!(c, '"' | '\'' | '`') {
            i = skip_string(&chars, i);
        } else if c == '{' {
            i = skip_group(i, '}');
        } else if c == '[' {
            i = skip_group(i, ']');
        } else if c == '$' || c.is_ascii_digit() || c == '.' {
            // A Grafana variable, a number or a duration.
            i += 1;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || "_.{}".contains(chars[i]))
            {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || "_:".contains(chars[i])) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let mut next = i;
            while next < chars.len() && chars[next].is_whitespace() {
                next += 1;
            }
            let opens = chars.get(next) == Some(&'(');
            if LABEL_LISTS.contains(&word.as_str()) {
                if opens {
                    i = skip_group(next, ')');
                }
            } else if !opens && !KEYWORDS.contains(&word.as_str()) {
                names.insert(word);
            }
        } else {
            i += 1;
        }
    }
    names
}

/// Index just past the string literal that starts at `i` (backslash escapes allowed).
fn skip_string(chars: &[char], mut i: usize) -> usize {
    let quote = chars[i];
    i += 1;
    while i < chars.len() && chars[i] != quote {
        i += if chars[i] == '\\' { 2 } else { 1 };
    }
    i + 1
}

/// The PromQL inside a Grafana variable query: `label_values(EXPR, label)` reads `EXPR`; other
/// queries are PromQL as they stand.
fn variable_promql(query: &str) -> &str {
    let query = query.trim();
    match query
        .strip_prefix("label_values(")
        .and_then(|q| q.strip_suffix(')'))
    {
        Some(args) => args.rsplit_once(',').map_or(args, |(expr, _label)| expr),
        None => query,
    }
}

/// Every PromQL expression of the dashboard: panel targets (`expr`, rows' nested panels too)
/// and templating queries.
fn dashboard_expressions(dashboard: &Value) -> Vec<String> {
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(map) => {
                if let Some(Value::String(expr)) = map.get("expr") {
                    out.push(expr.clone());
                }
                map.values().for_each(|v| walk(v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    for var in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if var["type"] != "query" {
            continue;
        }
        let query = var["query"]["query"]
            .as_str()
            .or_else(|| var["query"].as_str())
            .unwrap_or_default();
        out.push(variable_promql(query).to_owned());
    }
    out
}

/// The metric names a Prometheus text exposition offers: every sample's name, and every family
/// declared by `# TYPE` (a labelled counter has no sample until its first event), with the
/// `_bucket`, `_sum` and `_count` series of histograms.
fn exported_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        if let Some(decl) = line.strip_prefix("# TYPE ") {
            let mut parts = decl.split_whitespace();
            let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
                continue;
            };
            names.insert(name.to_owned());
            if kind == "histogram" || kind == "summary" {
                for suffix in ["_bucket", "_sum", "_count"] {
                    names.insert(format!("{name}{suffix}"));
                }
            }
        } else if !line.starts_with('#') && !line.trim().is_empty() {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            names.insert(line[..end].to_owned());
        }
    }
    names
}

#[test]
fn promql_names_skip_functions_labels_ranges_and_variables() {
    let names = promql_metric_names(
        r#"histogram_quantile(0.99, sum by (class, le) (rate(gpud_lease_wait_seconds_bucket{instance=~"$instance", class="a{b}"}[$__rate_interval])))
           / on (class) group_left (x) max without (le) (other_metric offset 5m) > bool 0.5 and third:recorded"#,
    );
    let want: BTreeSet<String> = [
        "gpud_lease_wait_seconds_bucket",
        "other_metric",
        "third:recorded",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(names, want);
    assert_eq!(
        variable_promql(r#"label_values(gpud_device_info{instance=~"$instance"}, device)"#),
        r#"gpud_device_info{instance=~"$instance"}"#
    );
}

#[test]
fn exported_names_include_declared_families_and_histogram_series() {
    let names = exported_names(
        "# TYPE a_total counter\n# TYPE h_seconds histogram\nh_seconds_bucket{le=\"1\"} 0\ng 1\n",
    );
    for name in [
        "a_total",
        "h_seconds_bucket",
        "h_seconds_sum",
        "h_seconds_count",
        "g",
    ] {
        assert!(names.contains(name), "{name} missing from {names:?}");
    }
    assert!(!names.contains("a_total_bucket"));
}

#[test]
fn every_metric_the_dashboard_queries_is_exported() {
    let path = repo_root_dir().join("dashboards/gpud.json");
    let text = std::fs::read_to_string(&path).expect("read dashboards/gpud.json");
    let dashboard: Value = serde_json::from_str(&text).expect("dashboards/gpud.json is JSON");
    let expressions = dashboard_expressions(&dashboard);
    assert!(
        expressions.len() >= 10,
        "the dashboard has only {} queries",
        expressions.len()
    );
    let queried: BTreeSet<String> = expressions
        .iter()
        .flat_map(|e| promql_metric_names(e))
        .collect();

    let daemon = Daemon::start("2x16GiB");
    let out = daemon.gpudctl(&["metrics"]);
    assert!(
        out.status.success(),
        "gpudctl metrics: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let exported = exported_names(&String::from_utf8_lossy(&out.stdout));
    let missing: Vec<&String> = queried.difference(&exported).collect();
    assert!(
        missing.is_empty(),
        "the dashboard queries metrics gpud does not export: {missing:?}"
    );
    // The dashboard covers what operators watch (docs/METRICS.md).
    for needed in [
        "gpud_device_memory_reserved_bytes",
        "gpud_device_memory_capacity_bytes",
        "gpud_queue_depth",
        "gpud_lease_wait_seconds_bucket",
        "gpud_lease_hold_seconds_bucket",
        "gpud_device_memory_over_use_bytes",
        "gpud_device_memory_unmanaged_bytes",
        "gpud_host_memory_reserved_bytes",
        "gpud_host_memory_over_use_bytes",
        "gpud_host_cpus_granted",
    ] {
        assert!(
            queried.contains(needed),
            "the dashboard never shows {needed}"
        );
    }
}
