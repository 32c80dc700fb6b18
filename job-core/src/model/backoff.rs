//! Exponential backoff with full jitter, implemented here rather than with the unmaintained
//! `backoff` crate (RUSTSEC-2025-0012).

use std::time::Duration;

/// Retry delays: `delay = uniform(0, min(cap, base * 2^attempt))`.
///
/// `attempt` is the number of the attempt that just failed, counting from 1, so the first retry
/// waits up to `2 * base`. Full jitter spreads retries of many jobs that failed together, so a
/// dependency that just recovered is not stampeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The unit delay, above zero (`WorkerBuilder::build` refuses a kind whose base is zero).
    /// Defaults to 1 second.
    pub base: Duration,
    /// The largest delay ever drawn, at least `base` (`WorkerBuilder::build` refuses a kind
    /// whose cap is below its base). Defaults to 1 hour.
    pub cap: Duration,
}

impl Backoff {
    /// One second base, one hour cap.
    pub const DEFAULT: Backoff = Backoff {
        base: Duration::from_secs(1),
        cap: Duration::from_secs(3600),
    };

    /// A backoff with the given base and cap.
    ///
    /// # Panics
    /// When `base` is zero or larger than `cap`: such a policy is a mistake, not a choice.
    pub const fn new(base: Duration, cap: Duration) -> Backoff {
        assert!(!base.is_zero(), "backoff base must be greater than zero");
        assert!(
            base.as_nanos() <= cap.as_nanos(),
            "backoff base must not exceed its cap"
        );
        Backoff { base, cap }
    }

    /// The upper bound of the delay after failed attempt `attempt` (1-based):
    /// `min(cap, base * 2^attempt)`.
    pub fn ceiling(&self, attempt: u32) -> Duration {
        // In nanoseconds, as u128: `base · 2^attempt` reaches the cap for any base (a factor
        // held to 2^31 kept a base under ~40 µs from ever reaching a cap of a day).
        let cap = self.cap.as_nanos();
        let ceiling = match 1u128.checked_shl(attempt.min(127)) {
            Some(factor) => self.base.as_nanos().saturating_mul(factor).min(cap),
            None => cap,
        };
        if ceiling >= cap {
            self.cap
        } else {
            // Below the cap, which is a Duration: its seconds fit.
            Duration::new(
                (ceiling / 1_000_000_000) as u64,
                (ceiling % 1_000_000_000) as u32,
            )
        }
    }

    /// The delay after failed attempt `attempt`, drawn uniformly from `[0, ceiling]`.
    pub fn delay(&self, attempt: u32, rng: &mut fastrand::Rng) -> Duration {
        let ceiling = self.ceiling(attempt).as_nanos().min(u64::MAX as u128) as u64;
        Duration::from_nanos(rng.u64(0..=ceiling))
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::DEFAULT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tiny_base_still_reaches_its_cap() {
        let b = Backoff::new(Duration::from_micros(10), Duration::from_secs(86_400));
        assert_eq!(b.ceiling(60), Duration::from_secs(86_400));
        assert_eq!(b.ceiling(u32::MAX), Duration::from_secs(86_400));
        assert_eq!(b.ceiling(1), Duration::from_micros(20));
        let b = Backoff::new(Duration::from_nanos(1), Duration::MAX);
        assert_eq!(b.ceiling(200), Duration::MAX);
        assert_eq!(
            b.ceiling(80),
            Duration::new(
                ((1u128 << 80) / 1_000_000_000) as u64,
                ((1u128 << 80) % 1_000_000_000) as u32
            )
        );
    }

    #[test]
    fn ceiling_doubles_until_the_cap() {
        let b = Backoff::new(Duration::from_secs(1), Duration::from_secs(10));
        assert_eq!(b.ceiling(1), Duration::from_secs(2));
        assert_eq!(b.ceiling(2), Duration::from_secs(4));
        assert_eq!(b.ceiling(3), Duration::from_secs(8));
        assert_eq!(b.ceiling(4), Duration::from_secs(10));
        assert_eq!(b.ceiling(500), Duration::from_secs(10));
    }

    #[test]
    fn delays_stay_inside_the_jittered_bounds() {
        let b = Backoff::DEFAULT;
        let mut rng = fastrand::Rng::with_seed(7);
        for attempt in 1..40 {
            for _ in 0..50 {
                assert!(b.delay(attempt, &mut rng) <= b.ceiling(attempt));
            }
        }
    }

    #[test]
    fn a_seeded_source_gives_the_same_delays() {
        let b = Backoff::DEFAULT;
        let draw = |seed| {
            let mut rng = fastrand::Rng::with_seed(seed);
            (1..10).map(|a| b.delay(a, &mut rng)).collect::<Vec<_>>()
        };
        assert_eq!(draw(42), draw(42));
        assert_ne!(draw(42), draw(43));
    }

    #[test]
    fn jitter_uses_the_whole_range() {
        let b = Backoff::new(Duration::from_secs(1), Duration::from_secs(1));
        let mut rng = fastrand::Rng::with_seed(1);
        let draws: Vec<_> = (0..1000).map(|_| b.delay(5, &mut rng)).collect();
        assert!(draws.iter().any(|d| *d < Duration::from_millis(100)));
        assert!(draws.iter().any(|d| *d > Duration::from_millis(900)));
    }

    #[test]
    #[should_panic(expected = "must not exceed its cap")]
    fn rejects_a_base_above_the_cap() {
        Backoff::new(Duration::from_secs(10), Duration::from_secs(1));
    }
}
