//! Percentiles and number formatting for the Markdown report.

use std::time::Duration;

/// Order statistics of a sample (nearest-rank percentiles).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    pub n: usize,
    pub p50: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

impl Summary {
    /// `None` for an empty sample.
    pub fn of(mut sample: Vec<f64>) -> Option<Self> {
        if sample.is_empty() {
            return None;
        }
        sample.sort_by(f64::total_cmp);
        let rank = |p: f64| sample[((p / 100.0 * sample.len() as f64).ceil() as usize).clamp(1, sample.len()) - 1];
        Some(Self {
            n: sample.len(),
            p50: rank(50.0),
            p90: rank(90.0),
            p95: rank(95.0),
            p99: rank(99.0),
            max: sample[sample.len() - 1],
        })
    }
}

pub fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// `count / duration`, per second.
pub fn rate(count: u64, duration: Duration) -> f64 {
    count as f64 / duration.as_secs_f64().max(1e-9)
}

/// A whole number with thousands separators: `12,345`.
pub fn int(value: f64) -> String {
    let digits = format!("{:.0}", value.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if value < -0.5 { format!("-{out}") } else { out }
}

/// Milliseconds with two decimals.
pub fn ms(value: f64) -> String {
    format!("{value:.2} ms")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let s = Summary::of((1..=100).map(f64::from).collect()).unwrap();
        assert_eq!((s.n, s.p50, s.p95, s.p99, s.max), (100, 50.0, 95.0, 99.0, 100.0));
        let one = Summary::of(vec![7.0]).unwrap();
        assert_eq!((one.p50, one.p99), (7.0, 7.0));
        assert_eq!(Summary::of(vec![]), None);
    }

    #[test]
    fn numbers_are_grouped() {
        assert_eq!(int(1234567.4), "1,234,567");
        assert_eq!(int(999.0), "999");
        assert_eq!(int(0.2), "0");
    }
}
