//! A per-kind concurrency limit holds across every worker.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use job::Enqueue;

use crate::common::*;
use crate::support::*;

#[tokio::test]
async fn four_workers_never_run_more_than_the_kinds_limit_at_once() {
    let h = Harness::new().await;
    let gauge = Gauge::default();
    let jobs: Vec<_> = (0..40).map(|n| Limited { n }).collect();
    Enqueue::<Limited>::many(h.store.pool(), jobs)
        .await
        .unwrap();
    let others: Vec<_> = (0..40).map(|n| Noop { n }).collect();
    Enqueue::<Noop>::many(h.store.pool(), others).await.unwrap();
    let workers: Vec<_> = (0..4)
        .map(|i| {
            lifecycle_worker(&h)
                .id(format!("limited-{i}"))
                .state(gauge.clone())
                .build()
                .unwrap()
                .start()
        })
        .collect();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let store = h.store.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut peak = 0i64;
            let mut samples = 0;
            while !stop.load(Ordering::SeqCst) {
                let n: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM job.jobs WHERE state = 'running' AND kind = 'test.limited'",
                )
                .fetch_one(store.pool())
                .await
                .unwrap();
                peak = peak.max(n);
                samples += 1;
                tokio::task::yield_now().await;
            }
            (peak, samples)
        })
    };
    eventually("every limited job to finish", || async {
        (gauge.done.load(Ordering::SeqCst) == 40).then_some(())
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    let (sampled_peak, samples) = sampler.await.unwrap();
    for w in workers {
        w.shutdown().await;
    }
    assert!(samples > 10, "the sampler ran ({samples} samples)");
    assert!(
        sampled_peak <= 2,
        "the table showed {sampled_peak} running at once"
    );
    let peak = gauge.peak.load(Ordering::SeqCst);
    assert!(peak <= 2, "handlers saw {peak} running at once");
    assert_eq!(peak, 2, "the limit is used, not just respected");
    assert_eq!(h.ledger.total(), 40, "the unlimited kind ran alongside");
}
