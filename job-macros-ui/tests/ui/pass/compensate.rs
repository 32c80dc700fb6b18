//! `compensate` names the job type to enqueue when a job of this kind is discarded; the
//! options keep that job's kind, default queue, priority, attempts and payload version.
#![deny(warnings)]

use job::__private::serde_json::Value;
use job::{job, Compensate, Discarded, Job, JobContext, JobError, JobOptions};

#[job(kind = "payments.refund", queue = "refunds", priority = 7, retry = 1, version = 2,
     upgrade = upgrade_refund)]
async fn refund_charge(_ctx: JobContext, discarded: Discarded) -> Result<(), JobError> {
    let _ = discarded;
    Ok(())
}

fn upgrade_refund(_from: i32, payload: Value) -> Result<Value, JobError> {
    Ok(payload)
}

#[job(compensate = RefundCharge)]
async fn charge_card(_ctx: JobContext, order_id: i64) -> Result<(), JobError> {
    let _ = order_id;
    Ok(())
}

mod support {
    use job::{job, Discarded, JobContext, JobError};

    #[job]
    pub async fn notify_support(_ctx: JobContext, discarded: Discarded) -> Result<(), JobError> {
        let _ = discarded;
        Ok(())
    }
}

/// A path to the job type, next to other keys.
#[job(queue = "payments", compensate = crate::support::NotifySupport, retry = 2)]
async fn charge_wallet(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

fn main() {
    assert_eq!(
        <ChargeCard as Job>::OPTIONS.compensate,
        Some(Compensate {
            kind: "payments.refund",
            queue: "refunds",
            priority: 7,
            max_attempts: 2,
            version: 2,
        })
    );
    assert_eq!(
        <ChargeWallet as Job>::OPTIONS.compensate,
        Some(Compensate {
            kind: "notify_support",
            queue: "default",
            priority: 0,
            max_attempts: 25,
            version: 1,
        })
    );
    assert_eq!(<ChargeWallet as Job>::OPTIONS.queue, "payments");
    assert_eq!(<ChargeWallet as Job>::OPTIONS.max_attempts, 3);
    assert_eq!(<RefundCharge as Job>::OPTIONS.compensate, None);
    assert_eq!(JobOptions::DEFAULT.compensate, None);
}
