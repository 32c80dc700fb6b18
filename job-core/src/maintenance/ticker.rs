//! The ticker loop every maintenance service shares.

/// The ticker loop every service shares: a pass every `interval` (a slow pass delays the next
/// rather than bunching them), until `stop` fires.
pub(crate) struct Ticker {
    tick: tokio::time::Interval,
    stop: tokio_util::sync::CancellationToken,
}

impl Ticker {
    pub(crate) fn new(
        interval: std::time::Duration,
        stop: tokio_util::sync::CancellationToken,
    ) -> Self {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Ticker { tick, stop }
    }

    /// Waits for the next tick; `false` once `stop` has fired.
    pub(crate) async fn next(&mut self) -> bool {
        tokio::select! {
            _ = self.tick.tick() => !self.stop.is_cancelled(),
            _ = self.stop.cancelled() => false,
        }
    }
}
