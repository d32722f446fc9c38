//! `gpudctl metrics --json`: the Prometheus text exposition as JSON, one object per sample
//! with the family's type and help (docs/METRICS.md names them).

use serde_json::{Map, Value, json};

/// The samples of an exposition: `{"samples": [{"name", "labels", "value", "type", "help"}]}`.
/// A value that JSON cannot carry (`NaN`, `+Inf`) is kept as its text.
pub fn to_json(text: &str) -> Result<Value, String> {
    let mut types: Map<String, Value> = Map::new();
    let mut helps: Map<String, Value> = Map::new();
    let mut samples = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            if let Some((name, kind)) = rest.split_once(' ') {
                types.insert(name.into(), kind.trim().into());
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            if let Some((name, help)) = rest.split_once(' ') {
                helps.insert(name.into(), help.into());
            }
            continue;
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |why: &str| format!("metrics line {}: {why}: {line:?}", n + 1);
        let (name, labels, rest) = match line.find(['{', ' ']) {
            Some(i) if line.as_bytes()[i] == b'{' => {
                let (labels, rest) = parse_labels(&line[i + 1..]).map_err(&bad)?;
                (&line[..i], labels, rest)
            }
            Some(i) => (&line[..i], Map::new(), &line[i..]),
            None => return Err(bad("no value")),
        };
        let value_text = rest
            .split_whitespace()
            .next()
            .ok_or_else(|| bad("no value"))?;
        let value = match value_text.parse::<f64>() {
            Ok(v) if v.is_finite() => json!(v),
            Ok(_) => json!(value_text),
            Err(_) => return Err(bad("not a number")),
        };
        // A histogram's `_bucket`, `_sum` and `_count` belong to the family without them.
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s).filter(|f| types.contains_key(*f)))
            .unwrap_or(name);
        samples.push(json!({
            "name": name,
            "labels": labels,
            "value": value,
            "type": types.get(family).cloned().unwrap_or(Value::Null),
            "help": helps.get(family).cloned().unwrap_or(Value::Null),
        }));
    }
    Ok(json!({ "samples": samples }))
}

/// `a="x",b="y\"z"} rest` into the labels and what follows the brace.
fn parse_labels(text: &str) -> Result<(Map<String, Value>, &str), &'static str> {
    let mut labels = Map::new();
    let mut rest = text;
    loop {
        rest = rest.trim_start_matches([' ', ',']);
        if let Some(after) = rest.strip_prefix('}') {
            return Ok((labels, after));
        }
        let (name, after) = rest.split_once("=\"").ok_or("a label without a value")?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c)) => value.push(c),
                    None => return Err("an unfinished escape"),
                },
                Some((i, '"')) => break i,
                Some((_, c)) => value.push(c),
                None => return Err("an unfinished label value"),
            }
        };
        labels.insert(name.trim().into(), value.into());
        rest = &after[end + 1..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_carry_labels_values_and_their_family() {
        let text = "# HELP gpud_sessions Connected sessions.\n# TYPE gpud_sessions gauge\n\
            gpud_sessions 3\n# TYPE gpud_wait_seconds histogram\n\
            gpud_wait_seconds_bucket{class=\"normal\",le=\"+Inf\"} 2\n\
            gpud_info{name=\"a \\\"quoted\\\", b\"} NaN\n";
        let v = to_json(text).unwrap();
        let s = v["samples"].as_array().unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(s[0]["name"], "gpud_sessions");
        assert_eq!(s[0]["value"], 3.0);
        assert_eq!(s[0]["type"], "gauge");
        assert_eq!(s[0]["help"], "Connected sessions.");
        assert_eq!(s[1]["labels"]["le"], "+Inf");
        assert_eq!(s[1]["type"], "histogram");
        assert_eq!(s[2]["labels"]["name"], "a \"quoted\", b");
        assert_eq!(s[2]["value"], "NaN");
        assert!(to_json("gpud_x{a=\"1\" 2\n").is_err());
    }
}
