//! Wake-ups: a listener learns of new work at once, without waiting for a poll.

use job_core::{Release, Store};

use super::support::{claim_one, new_job, NOOP, PATIENCE};

/// Waits for one wake-up and checks it names `queue` or every queue (the empty name).
async fn woken_for(wakeups: &mut job_core::Wakeups, queue: &str) {
    let name = tokio::time::timeout(PATIENCE, wakeups.recv())
        .await
        .unwrap_or_else(|_| panic!("no wake-up within {PATIENCE:?}"))
        .expect("the wake-ups ended");
    assert!(
        name == queue || name.is_empty(),
        "woken for queue {name:?}, expected {queue:?} or every queue (\"\")"
    );
}

/// A committed enqueue wakes a listener of the same store, naming its queue or every queue.
pub async fn an_enqueue_wakes_a_listener<S: Store>(store: S) {
    let mut wakeups = store.listen().await.unwrap();
    store
        .enqueue(job_core::NewJob {
            queue: "mail".into(),
            ..new_job(NOOP)
        })
        .await
        .unwrap();
    woken_for(&mut wakeups, "mail").await;
}

/// A released job wakes a listener: another worker can take it at once.
pub async fn a_release_wakes_a_listener<S: Store>(store: S) {
    store.enqueue(new_job(NOOP)).await.unwrap();
    let job = claim_one(&store, NOOP).await;
    let mut wakeups = store.listen().await.unwrap();
    assert_eq!(
        store
            .release(&[Release::unstarted(job.lease)])
            .await
            .unwrap(),
        1
    );
    woken_for(&mut wakeups, "default").await;
}
