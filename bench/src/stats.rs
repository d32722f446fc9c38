//! Latency statistics for benchmarks.

use std::time::Duration;

/// Percentiles of a sample of durations.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Summary {
    /// Samples.
    pub n: usize,
    /// Median, microseconds.
    pub p50_us: f64,
    /// 99th percentile, microseconds.
    pub p99_us: f64,
    /// Mean, microseconds.
    pub mean_us: f64,
    /// Largest, microseconds.
    pub max_us: f64,
}

/// Summarizes a sample (sorted in place).
pub fn summarize(samples: &mut [Duration]) -> Summary {
    samples.sort_unstable();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let n = samples.len();
    let at = |q: f64| us(samples[((n as f64 - 1.0) * q).round() as usize]);
    Summary {
        n,
        p50_us: at(0.50),
        p99_us: at(0.99),
        mean_us: samples.iter().map(|d| us(*d)).sum::<f64>() / n as f64,
        max_us: us(samples[n - 1]),
    }
}
