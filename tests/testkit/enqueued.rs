//! What the enqueue assertions see: `pending` jobs wait too (behind an ordering key or a
//! dependency), and a job of the kind that does not decode fails only the assertions it would
//! answer, each failure saying how many do not decode.

use job::{Enqueue, Job, JobContext, JobError, JobId};
use job_testkit::{assert_enqueued, enqueued, refute_enqueued, TestDb};
use serde::{Deserialize, Serialize};
use serde_json::json;
use sqlx::PgPool;

/// Posts a ledger entry.
#[derive(Debug, Serialize, Deserialize)]
struct PostEntry {
    account_id: i64,
    cents: i64,
}

impl Job for PostEntry {
    const KIND: &'static str = "testkit.post_entry";

    async fn perform(self, _: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

fn entry(account_id: i64, cents: i64) -> PostEntry {
    PostEntry { account_id, cents }
}

/// Job `id`'s state, as text.
async fn state(pool: &PgPool, id: JobId) -> String {
    sqlx::query_scalar("SELECT state::text FROM job.jobs WHERE id = $1")
        .bind(id)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// The message of the panic `assertion` ends with.
async fn panic_message(
    assertion: impl std::future::Future<Output = ()> + Send + 'static,
) -> String {
    let panic = tokio::spawn(assertion)
        .await
        .expect_err("the assertion should fail")
        .into_panic();
    match panic.downcast::<String>() {
        Ok(message) => *message,
        Err(panic) => panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .unwrap_or_default(),
    }
}

#[tokio::test]
async fn a_pending_job_is_enqueued_for_the_assertions() {
    let db = TestDb::new().await;
    let pool = db.pool();
    let head = Enqueue::new(entry(7, 500))
        .ordering_key("account:7")
        .enqueue(&pool)
        .await
        .unwrap();
    let behind = Enqueue::new(entry(7, -200))
        .ordering_key("account:7")
        .enqueue(&pool)
        .await
        .unwrap();
    let after = Enqueue::new(entry(8, 900))
        .depends_on([head])
        .enqueue(&pool)
        .await
        .unwrap();
    assert_eq!(state(&pool, behind).await, "pending");
    assert_eq!(state(&pool, after).await, "pending");

    assert_eq!(
        assert_enqueued::<PostEntry>(&pool, json!({ "account_id": 7, "cents": -200 })).await,
        behind,
        "the job behind its ordering key"
    );
    assert_eq!(
        assert_enqueued::<PostEntry>(&pool, json!({ "account_id": 8 })).await,
        after,
        "the job waiting for its dependency"
    );
    let ids: Vec<JobId> = enqueued::<PostEntry>(&pool)
        .await
        .iter()
        .map(|j| j.id)
        .collect();
    assert_eq!(ids, [head, behind, after]);
    let pool2 = pool.clone();
    let refuted = panic_message(async move {
        refute_enqueued::<PostEntry>(&pool2, json!({ "account_id": 8 })).await;
    })
    .await;
    assert!(
        refuted.contains(&format!("found job {after} (pending")),
        "{refuted}"
    );
    db.close().await;
}

#[tokio::test]
async fn a_job_of_the_kind_that_does_not_decode_fails_only_the_assertions_it_answers() {
    let db = TestDb::new().await;
    let pool = db.pool();
    let good = Enqueue::new(entry(1, 100)).enqueue(&pool).await.unwrap();
    // A poison payload, dead-lettered, and a payload from a newer version of the kind.
    let poison = Enqueue::new(entry(2, 200)).enqueue(&pool).await.unwrap();
    sqlx::query(
        "UPDATE job.jobs SET payload = '{\"account_id\": \"two\"}', state = 'discarded', \
         finalized_at = now() WHERE id = $1",
    )
    .bind(poison)
    .execute(&pool)
    .await
    .unwrap();
    let newer = Enqueue::new(entry(3, 300)).enqueue(&pool).await.unwrap();
    sqlx::query("UPDATE job.jobs SET payload_version = payload_version + 1 WHERE id = $1")
        .bind(newer)
        .execute(&pool)
        .await
        .unwrap();

    assert_eq!(
        assert_enqueued::<PostEntry>(&pool, json!({ "account_id": 1 })).await,
        good
    );
    refute_enqueued::<PostEntry>(&pool, json!({ "account_id": 4 })).await;

    // Every failure says how many jobs of the kind do not decode.
    let pool2 = pool.clone();
    let missing = panic_message(async move {
        assert_enqueued::<PostEntry>(&pool2, json!({ "account_id": 4 })).await;
    })
    .await;
    assert!(
        missing.contains("of the kind's 3 jobs, 2 do not decode as"),
        "{missing}"
    );
    assert!(
        missing.contains(&format!("job {poison} (discarded)"))
            && missing.contains(&format!("job {newer} (available)")),
        "{missing}"
    );
    // The newer job matches by its payload, but cannot be returned as a `PostEntry`.
    let pool2 = pool.clone();
    let undecodable = panic_message(async move {
        assert_enqueued::<PostEntry>(&pool2, json!({ "account_id": 3 })).await;
    })
    .await;
    assert!(
        undecodable.contains(&format!(
            "job {newer} matches, but its payload does not decode"
        )),
        "{undecodable}"
    );
    let pool2 = pool.clone();
    let waiting = panic_message(async move {
        enqueued::<PostEntry>(&pool2).await;
    })
    .await;
    assert!(
        waiting.contains(&format!("waiting job {newer} (available) does not decode")),
        "{waiting}"
    );
    assert!(waiting.contains("2 do not decode"), "{waiting}");

    // With the newer job gone, the dead-lettered poison stands in no one's way.
    sqlx::query("DELETE FROM job.jobs WHERE id = $1")
        .bind(newer)
        .execute(&pool)
        .await
        .unwrap();
    let jobs = enqueued::<PostEntry>(&pool).await;
    assert_eq!(
        jobs.iter().map(|j| (j.id, j.job.cents)).collect::<Vec<_>>(),
        [(good, 100)]
    );
    db.close().await;
}

/// A bonus with an optional coupon, skipped when it has none.
#[derive(Debug, Serialize, Deserialize)]
struct GrantBonus {
    account_id: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    coupon: Option<String>,
}

impl Job for GrantBonus {
    const KIND: &'static str = "testkit.grant_bonus";

    async fn perform(self, _: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[tokio::test]
async fn a_refute_that_could_never_fail_fails() {
    // `invoce_id` for `invoice_id`, or a string for a number: no job can ever match, so the
    // refute passed whatever the code under test enqueued.
    let db = TestDb::new().await;
    let pool = db.pool();
    Enqueue::new(entry(1, 100)).enqueue(&pool).await.unwrap();
    let p = pool.clone();
    let misspelled = panic_message(async move {
        refute_enqueued::<PostEntry>(&p, json!({ "acount_id": 1 })).await;
    })
    .await;
    assert!(
        misspelled.contains("could never fail")
            && misspelled.contains("has no field `acount_id` (its fields: account_id, cents)"),
        "{misspelled}"
    );
    let p = pool.clone();
    let mistyped = panic_message(async move {
        refute_enqueued::<PostEntry>(&p, json!({ "account_id": "1" })).await;
    })
    .await;
    assert!(
        mistyped.contains("field `account_id` is a string here, and a number in every job"),
        "{mistyped}"
    );
    // What could fail still passes: another value, a field every job so far left out (an
    // `Option` skipped when empty), and null for a field that may hold it.
    refute_enqueued::<PostEntry>(&pool, json!({ "account_id": 2 })).await;
    Enqueue::new(GrantBonus {
        account_id: 1,
        coupon: None,
    })
    .enqueue(&pool)
    .await
    .unwrap();
    refute_enqueued::<GrantBonus>(&pool, json!({ "coupon": "WELCOME" })).await;
    refute_enqueued::<GrantBonus>(&pool, json!({ "account_id": null })).await;
    db.close().await;
}
