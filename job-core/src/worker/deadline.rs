//! Instants from configured durations. `Instant + Duration` panics when the sum does not fit
//! the platform's clock, and so does Tokio's timer given a deadline near the clock's end (it
//! rounds the deadline up). A user's duration can be anything `build()` let through, so every
//! instant the worker computes from one goes through [`after`] (a timer's deadline) or
//! [`saturating`] (bookkeeping no timer waits for), which never panic.

use std::time::Duration;

use tokio::time::Instant;

/// The furthest a timer of the worker is set: 30 years, the cap Tokio's own `sleep` applies
/// (some platforms' clocks end within 100 years of now). A wait that long never ends for a
/// running worker anyway.
const FAR: Duration = Duration::from_secs(30 * 365 * 24 * 3600);

/// `at + wait` as a timer's deadline (`sleep_until`, `timeout_at`): at most [`FAR`] after `at`,
/// and `at` itself when even that does not fit.
pub(crate) fn after(at: Instant, wait: Duration) -> Instant {
    at.checked_add(wait.min(FAR)).unwrap_or(at)
}

/// `at + wait` exactly when it fits the clock, else the furthest instant after `at` that does.
/// For instants only compared, never waited for (a lease's local expiry).
pub(crate) fn saturating(at: Instant, wait: Duration) -> Instant {
    if let Some(end) = at.checked_add(wait) {
        return end;
    }
    // Halve what is left until it fits: about 64 steps at most, and `at + 0` always fits.
    let mut end = at;
    let mut step = wait;
    while !step.is_zero() {
        step /= 2;
        if let Some(further) = end.checked_add(step) {
            end = further;
        }
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;

    const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

    #[test]
    fn a_timer_deadline_is_exact_up_to_thirty_years_and_capped_beyond() {
        let now = Instant::now();
        let wait = Duration::from_secs(3600);
        assert_eq!(after(now, wait), now + wait);
        assert_eq!(after(now, CENTURY), now + FAR);
        assert_eq!(after(now, Duration::MAX), now + FAR);
    }

    #[tokio::test]
    async fn tokio_sleeps_until_the_furthest_timer_deadline_without_a_panic() {
        // A deadline computed from another, as the drain's grace is from its timeout.
        let far = after(after(Instant::now(), Duration::MAX), Duration::MAX);
        let slept = tokio::time::timeout(Duration::from_millis(1), tokio::time::sleep_until(far));
        assert!(slept.await.is_err(), "still asleep");
    }

    #[test]
    fn a_bookkeeping_instant_is_exact_when_it_fits_and_far_when_not() {
        let now = Instant::now();
        assert_eq!(saturating(now, CENTURY), now + CENTURY);
        assert_eq!(saturating(now, Duration::ZERO), now);
        assert!(saturating(now, Duration::MAX) >= now + FAR);
    }
}
