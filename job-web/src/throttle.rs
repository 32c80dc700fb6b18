//! A bound on guessing the operator token: after [`FAILURES`] wrong logins within a minute,
//! every login (a right token too, or a guess could still tell) is refused (429) until that
//! minute is over. Per dashboard router, in memory: one lock and two numbers, no clock but
//! `Instant`s the caller passes. Someone who keeps guessing keeps the operator from logging
//! in meanwhile; sessions already open keep working.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Wrong logins allowed within [`WINDOW`].
pub(crate) const FAILURES: u32 = 10;
/// The window wrong logins are counted in.
pub(crate) const WINDOW: Duration = Duration::from_secs(60);

/// Wrong logins in the current window: when it started and how many.
#[derive(Debug)]
pub(crate) struct LoginThrottle {
    window: Mutex<(Instant, u32)>,
}

impl LoginThrottle {
    pub(crate) fn new(now: Instant) -> LoginThrottle {
        LoginThrottle {
            window: Mutex::new((now, 0)),
        }
    }

    /// `Err(how long to wait)` while the current window holds [`FAILURES`] wrong logins.
    pub(crate) fn admit(&self, now: Instant) -> Result<(), Duration> {
        let mut window = self.window.lock().unwrap_or_else(|e| e.into_inner());
        let (start, failures) = current(&mut window, now);
        if failures >= FAILURES {
            Err((start + WINDOW).saturating_duration_since(now))
        } else {
            Ok(())
        }
    }

    /// Counts a wrong login.
    pub(crate) fn failed(&self, now: Instant) {
        let mut window = self.window.lock().unwrap_or_else(|e| e.into_inner());
        current(&mut window, now);
        window.1 = window.1.saturating_add(1);
    }
}

/// The window `now` is in, starting a new one when the last is over.
fn current(window: &mut (Instant, u32), now: Instant) -> (Instant, u32) {
    if now.saturating_duration_since(window.0) >= WINDOW {
        *window = (now, 0);
    }
    *window
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrong_logins_past_the_limit_wait_out_the_minute() {
        let t0 = Instant::now();
        let throttle = LoginThrottle::new(t0);
        for _ in 0..FAILURES {
            assert_eq!(throttle.admit(t0), Ok(()));
            throttle.failed(t0);
        }
        let later = t0 + Duration::from_secs(45);
        assert_eq!(throttle.admit(later), Err(Duration::from_secs(15)));
        assert_eq!(throttle.admit(t0 + WINDOW), Ok(()));
        throttle.failed(t0 + WINDOW);
        assert_eq!(throttle.admit(t0 + WINDOW), Ok(()));
    }
}
