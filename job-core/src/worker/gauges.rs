//! The saturation gauges of one worker's queue (`job_in_flight`, `job_free_slots`,
//! `job_prefetched`), updated when they change: a claim, a start, a slot freed, a give-back.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::telemetry::QueueSlots;

/// What the gauges of one queue are computed from.
pub(crate) struct SlotGauges {
    gauges: QueueSlots,
    concurrency: usize,
    slots: Arc<Semaphore>,
    /// Claimed jobs not yet started (prefetched, or on their way to a free slot).
    waiting: AtomicUsize,
}

impl SlotGauges {
    pub(crate) fn new(queue: &str, concurrency: usize, slots: Arc<Semaphore>) -> Arc<Self> {
        let gauges = Arc::new(SlotGauges {
            gauges: QueueSlots::new(queue),
            concurrency,
            slots,
            waiting: AtomicUsize::new(0),
        });
        gauges.report();
        gauges
    }

    /// `n` jobs were claimed and wait for a slot.
    pub(crate) fn claimed(&self, n: usize) {
        if n > 0 {
            self.waiting.fetch_add(n, Ordering::AcqRel);
            self.report();
        }
    }

    /// `n` claimed jobs stopped waiting: started, or given back.
    pub(crate) fn left(&self, n: usize) {
        let _ = self
            .waiting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                Some(w.saturating_sub(n))
            });
        self.report();
    }

    /// Sets the gauges from the slots and the waiting jobs.
    pub(crate) fn report(&self) {
        let free = self.slots.available_permits().min(self.concurrency);
        self.gauges.set(
            self.concurrency - free,
            free,
            self.waiting.load(Ordering::Acquire),
        );
    }
}

/// An execution slot: frees its permit, then updates the gauges, when dropped.
pub(crate) struct Slot {
    permit: Option<OwnedSemaphorePermit>,
    gauges: Arc<SlotGauges>,
}

impl Slot {
    pub(crate) fn new(permit: OwnedSemaphorePermit, gauges: Arc<SlotGauges>) -> Self {
        Slot {
            permit: Some(permit),
            gauges,
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        drop(self.permit.take());
        self.gauges.report();
    }
}
