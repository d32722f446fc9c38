//! A Prometheus histogram with fixed buckets.

use std::fmt::Write;
use std::time::Duration;

/// Upper bounds for waits, in seconds: a handoff takes well under a millisecond, a queue behind
/// a proof takes minutes.
pub const WAIT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.025, 0.1, 0.5, 1.0, 2.5, 10.0, 30.0, 60.0, 300.0, 1800.0,
];
/// Upper bounds for holds, in seconds: from a quick PoSt partition to a long batch.
pub const HOLD_BUCKETS: &[f64] = &[
    0.01, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0, 3600.0,
];

/// Counts of observations per bucket, their sum and count.
#[derive(Debug, Clone)]
pub struct Histogram {
    bounds: &'static [f64],
    /// Observations that fell in each bucket (not cumulative); the last is +Inf.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    /// An empty histogram over `bounds` (ascending).
    pub fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
            count: 0,
        }
    }

    /// Records one duration.
    pub fn observe(&mut self, d: Duration) {
        let v = d.as_secs_f64();
        let i = self.bounds.partition_point(|&b| b < v);
        self.counts[i] += 1;
        self.sum += v;
        self.count += 1;
    }

    /// How many observations.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Writes the `_bucket`, `_sum` and `_count` lines with `labels` (`k="v",…`, may be empty).
    pub fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cumulative = 0;
        for (i, n) in self.counts.iter().enumerate() {
            cumulative += n;
            let le = self
                .bounds
                .get(i)
                .map_or_else(|| "+Inf".to_string(), |b| b.to_string());
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {cumulative}"
            );
        }
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{braces} {}", self.sum);
        let _ = writeln!(out, "{name}_count{braces} {}", self.count);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_bounds_inclusive() {
        let mut h = Histogram::new(&[1.0, 10.0]);
        h.observe(Duration::from_secs(1));
        h.observe(Duration::from_secs(5));
        h.observe(Duration::from_secs(50));
        let mut out = String::new();
        h.render(&mut out, "x_seconds", "class=\"normal\"");
        assert_eq!(
            out,
            "x_seconds_bucket{class=\"normal\",le=\"1\"} 1\n\
             x_seconds_bucket{class=\"normal\",le=\"10\"} 2\n\
             x_seconds_bucket{class=\"normal\",le=\"+Inf\"} 3\n\
             x_seconds_sum{class=\"normal\"} 56\n\
             x_seconds_count{class=\"normal\"} 3\n"
        );
    }
}
