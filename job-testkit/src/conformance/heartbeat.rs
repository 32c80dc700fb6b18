//! Heartbeats: renewing held leases and reporting the lost ones.

use std::time::Duration;

use job_core::{Finalize, InvalidRenewal, JobState, Lease, Outcome, Renewal, Rescued, Store};
use uuid::Uuid;

use super::support::{
    finalize_one, new_job, outlive, request, row, running, short_lease, ClaimDue, NOOP,
};

fn renew(lease: Lease, extend_by: Duration) -> Renewal {
    Renewal {
        lease,
        extend_by,
        stuck: false,
    }
}

/// A heartbeat extends held leases and reports finished and forged ones as lost, renewing
/// nothing for them; an empty heartbeat reports nothing.
pub async fn heartbeat_renews_and_reports_lost_leases<S: Store>(store: S) {
    store
        .enqueue_many(vec![new_job(NOOP), new_job(NOOP), new_job(NOOP)])
        .await
        .unwrap();
    let claimed = store.claim_due(&request(&[NOOP], 3)).await.unwrap();
    assert_eq!(claimed.len(), 3);
    let (alive, finished, stolen) = (claimed[0].lease, claimed[1].lease, claimed[2].lease);
    store
        .finalize(&[Finalize {
            result: None,
            lease: finished,
            outcome: Outcome::Complete,
        }])
        .await
        .unwrap();
    let forged = Lease {
        id: stolen.id,
        token: Uuid::new_v4(),
    };
    let before = row(&store, alive.id).await.locked_until.unwrap();
    let stolen_before = row(&store, stolen.id).await;

    let hour = Duration::from_secs(3600);
    let mut report = store
        .heartbeat(&[
            renew(alive, hour),
            renew(finished, hour),
            renew(forged, hour),
        ])
        .await
        .unwrap();
    report.lost.sort_unstable_by_key(|l| l.id);
    let mut expected = vec![finished, forged];
    expected.sort_unstable_by_key(|l| l.id);
    assert_eq!(report.lost, expected);
    assert!(report.cancel_requested.is_empty(), "{report:?}");

    let after = row(&store, alive.id).await.locked_until.unwrap();
    assert!(
        after - before > chrono::Duration::minutes(59),
        "a renewal by 1 h moved the lease from {before} to {after}"
    );
    assert_eq!(
        row(&store, stolen.id).await,
        stolen_before,
        "the forged token renewed"
    );
    assert_eq!(store.heartbeat(&[]).await.unwrap(), Default::default());
}

/// Of two leases of one job sent together, the one the job holds is renewed and the other is
/// reported lost: a report names leases, not jobs. A worker can hold both, when the answer to
/// its give-back of a job was lost and it claimed the job again.
pub async fn of_two_leases_of_one_job_only_the_stale_one_is_lost<S: Store>(store: S) {
    let job = running(&store).await;
    let stale = Lease {
        id: job.lease.id,
        token: Uuid::new_v4(),
    };
    let hour = Duration::from_secs(3600);
    let before = row(&store, job.lease.id).await.locked_until.unwrap();
    for order in [[stale, job.lease], [job.lease, stale]] {
        let report = store
            .heartbeat(&order.map(|lease| renew(lease, hour)))
            .await
            .unwrap();
        assert_eq!(report.lost, vec![stale], "{report:?}");
        assert!(report.busy.is_empty(), "{report:?}");
    }
    let after = row(&store, job.lease.id).await.locked_until.unwrap();
    assert!(
        after - before > chrono::Duration::minutes(59),
        "the held lease was not renewed: {before} then {after}"
    );
}

/// A renewal never moves a lease's end back: a heartbeat whose statement commits after a later
/// one's (its answer given up for late, the statement still running in its session), or one
/// that asks for less than is left, leaves the later end. Else the store's end could come
/// before the one the worker counts on, and the rescuer could take the job while it runs.
pub async fn a_renewal_never_shortens_a_lease<S: Store>(store: S) {
    let job = running(&store).await;
    let report = store
        .heartbeat(&[renew(job.lease, Duration::from_secs(3600))])
        .await
        .unwrap();
    assert!(report.lost.is_empty(), "{report:?}");
    let long = row(&store, job.lease.id).await.locked_until.unwrap();
    let report = store
        .heartbeat(&[renew(job.lease, Duration::from_secs(1))])
        .await
        .unwrap();
    assert!(report.lost.is_empty(), "{report:?}");
    let after = row(&store, job.lease.id).await.locked_until.unwrap();
    assert_eq!(after, long, "a renewal by 1 s moved the lease's end back");
}

/// A heartbeat with a renewal under 1 ms or over `MAX_DURATION` is refused, naming that
/// lease, and renews none of its leases, the valid ones sent with it included; a renewal of
/// 1 ms is taken.
pub async fn a_renewal_out_of_bounds_is_refused_and_renews_nothing<S: Store>(store: S) {
    let first = running(&store).await;
    let second = running(&store).await;
    let before = (
        row(&store, first.lease.id).await,
        row(&store, second.lease.id).await,
    );
    let hour = Duration::from_secs(3600);
    let over = job_core::MAX_DURATION + Duration::from_millis(1);
    for extend_by in [Duration::ZERO, Duration::from_micros(999), over] {
        let error = store
            .heartbeat(&[renew(first.lease, hour), renew(second.lease, extend_by)])
            .await
            .expect_err("a renewal out of bounds was taken");
        assert!(error.is_refused(), "not refused: {error}");
        let invalid = error
            .inner()
            .downcast_ref::<InvalidRenewal>()
            .unwrap_or_else(|| panic!("not an InvalidRenewal: {error:?}"));
        assert_eq!(
            (invalid.lease, invalid.extend_by),
            (second.lease, extend_by),
            "{error}"
        );
        assert!(
            error
                .to_string()
                .contains(&format!("lease of job {}", second.lease.id)),
            "{error}"
        );
        let after = (
            row(&store, first.lease.id).await,
            row(&store, second.lease.id).await,
        );
        assert_eq!(after, before, "a refused heartbeat renewed a lease");
    }
    let report = store
        .heartbeat(&[renew(first.lease, Duration::from_millis(1))])
        .await
        .unwrap();
    assert!(report.lost.is_empty(), "{report:?}");
}

/// A lease kept alive by heartbeats outlives its original length and is never rescued.
pub async fn a_renewed_lease_is_not_rescued_after_its_first_expiry<S: Store>(store: S) {
    let id = store.enqueue(new_job(NOOP)).await.unwrap();
    let claimed = store.claim_due(&short_lease()).await.unwrap();
    assert_eq!(claimed.len(), 1);
    let lease = claimed[0].lease;
    let report = store
        .heartbeat(&[renew(lease, Duration::from_secs(30))])
        .await
        .unwrap();
    assert!(
        report.lost.is_empty(),
        "a held lease was reported lost: {report:?}"
    );
    outlive(super::support::SHORT_LEASE).await;
    assert_eq!(store.rescue_expired(100).await.unwrap(), Rescued::default());
    let row = row(&store, id).await;
    assert_eq!(
        (row.state, row.lock_token, row.attempt),
        (JobState::Running, Some(lease.token), 1)
    );
}

/// A renewal that reports its execution stuck records since when (kept across renewals), and
/// a renewal without it, or the job's outcome, clears it.
pub async fn a_stuck_renewal_is_recorded_until_it_is_not<S: Store>(store: S) {
    let job = running(&store).await;
    let id = job.lease.id;
    assert_eq!(row(&store, id).await.stuck_since, None);
    let stuck = Renewal {
        stuck: true,
        ..renew(job.lease, Duration::from_secs(30))
    };
    assert!(store.heartbeat(&[stuck]).await.unwrap().lost.is_empty());
    let since = row(&store, id).await.stuck_since;
    assert!(since.is_some(), "stuck_since not recorded");
    store.heartbeat(&[stuck]).await.unwrap();
    assert_eq!(row(&store, id).await.stuck_since, since, "kept while stuck");
    store
        .heartbeat(&[renew(job.lease, Duration::from_secs(30))])
        .await
        .unwrap();
    assert_eq!(row(&store, id).await.stuck_since, None, "cleared when not");
    store.heartbeat(&[stuck]).await.unwrap();
    let done = finalize_one(&store, job.lease, Outcome::Complete).await;
    assert_eq!(done.stuck_since, None, "cleared with the lease");
}
