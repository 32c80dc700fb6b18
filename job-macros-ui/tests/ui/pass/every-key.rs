//! Every key at once, and what each one sets.
#![deny(warnings)]

use std::time::Duration;

use job::__private::serde_json::{json, Value};
use job::{
    job, Backoff, Breaker, Compensate, Discarded, Job, JobContext, JobError, JobOptions, RateLimit,
};

/// Version 1 called the field `id`.
fn upgrade_report(from_version: i32, mut payload: Value) -> Result<Value, JobError> {
    match from_version {
        1 => Ok(json!({ "report_id": payload["id"].take(), "format": "pdf" })),
        v => Err(JobError::terminal(format!("no upgrade from version {v}"))),
    }
}

/// Enqueued when a `build_report` job is discarded.
#[job(queue = "cleanup")]
async fn drop_partial_report(_ctx: JobContext, discarded: Discarded) -> Result<(), JobError> {
    let _ = discarded;
    Ok(())
}

#[job(
    kind = "reports.build",
    version = 2,
    upgrade = upgrade_report,
    queue = "reports",
    priority = 3,
    retry = 4,
    timeout = "1h 30m",
    lease = "45s",
    backoff(base = "250ms", cap = "10m"),
    unique = "report:{report_id}:{format}",
    ordering = "{{reports}}:{format}",
    concurrency = 4,
    owner = "reporting",
    compensate = DropPartialReport,
    rate = "100/1m",
    rate_key = "{format}/{{tenant}}:{report_id}",
    breaker(failure_percent = 50, min_attempts = 10, window = "2m", cool_down = "15m"),
)]
async fn build_report(_ctx: JobContext, report_id: i64, format: String) -> Result<(), JobError> {
    let _ = (report_id, format);
    Ok(())
}

#[job(backoff(base = "2s"))]
async fn only_base(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

#[job(backoff(cap = "1s"), retry = 0)]
async fn only_cap(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

#[job(rate = "10/s", breaker(failure_percent = 100))]
async fn per_bare_unit(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

/// `rate_key` before `rate`, and a raw identifier named by its plain name.
#[job(rate_key = "tenant:{tenant_id}:{type}", rate = "5/1s")]
async fn per_tenant(_ctx: JobContext, tenant_id: u32, r#type: String) -> Result<(), JobError> {
    let _ = (tenant_id, r#type);
    Ok(())
}

#[job(
    rate = "10000/1ms",
    breaker(cool_down = "30 days", failure_percent = 1, window = "1s"),
    lease = "30ms"
)]
async fn at_the_limits(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

fn main() {
    assert_eq!(BuildReport::KIND, "reports.build");
    assert_eq!(BuildReport::VERSION, 2);
    assert_eq!(
        BuildReport::OPTIONS,
        JobOptions {
            queue: "reports",
            priority: 3,
            max_attempts: 5,
            timeout: Duration::from_secs(5400),
            lease: Duration::from_secs(45),
            backoff: Backoff::new(Duration::from_millis(250), Duration::from_secs(600)),
            concurrency: Some(4),
            owner: Some("reporting"),
            compensate: Some(Compensate {
                kind: "drop_partial_report",
                queue: "cleanup",
                priority: 0,
                max_attempts: 25,
                version: 1,
            }),
            rate: Some(RateLimit::new(100, Duration::from_secs(60))),
            breaker: Some(Breaker {
                failure_percent: 50,
                min_attempts: 10,
                window: Duration::from_secs(120),
                cool_down: Duration::from_secs(900),
            }),
        }
    );
    let report = BuildReport {
        report_id: 7,
        format: "pdf".into(),
    };
    assert_eq!(report.unique_key().as_deref(), Some("report:7:pdf"));
    // Values are escaped where a template of several placeholders would let two payloads
    // share a key: where the text between them starts (`:`, `/`) and `%`, never the text
    // around them.
    let odd = PerTenant {
        tenant_id: 4,
        r#type: "2:sync".into(),
    };
    assert_eq!(odd.rate_key().as_deref(), Some("tenant:4:2%3Async"));
    let percent = BuildReport {
        report_id: 7,
        format: "p%:df/x".into(),
    };
    assert_eq!(percent.unique_key().as_deref(), Some("report:7:p%25%3Adf/x"));
    assert_eq!(percent.ordering_key().as_deref(), Some("{reports}:p%:df/x"));
    assert_eq!(percent.rate_key().as_deref(), Some("p%25:df%2Fx/{tenant}:7"));
    assert_eq!(OnlyBase {}.unique_key(), None);
    assert_eq!(report.ordering_key().as_deref(), Some("{reports}:pdf"));
    assert_eq!(OnlyBase {}.ordering_key(), None);
    assert_eq!(report.rate_key().as_deref(), Some("pdf/{tenant}:7"));
    assert_eq!(OnlyBase {}.rate_key(), None);
    assert_eq!(PerBareUnit {}.rate_key(), None);
    let tenant = PerTenant {
        tenant_id: 42,
        r#type: "sync".into(),
    };
    assert_eq!(tenant.rate_key().as_deref(), Some("tenant:42:sync"));
    assert_eq!(tenant.unique_key(), None);
    assert_eq!(
        PerTenant::OPTIONS.rate,
        Some(RateLimit::new(5, Duration::from_secs(1)))
    );
    let upgraded = BuildReport::upgrade(1, json!({ "id": 7 })).unwrap();
    assert_eq!(upgraded, json!({ "report_id": 7, "format": "pdf" }));

    // A half-given backoff takes the other half from `Backoff::DEFAULT`, which the macro's
    // compile-time check of base <= cap assumes to be 1s and 1h.
    assert_eq!(
        Backoff::DEFAULT,
        Backoff::new(Duration::from_secs(1), Duration::from_secs(3600))
    );
    assert_eq!(OnlyBase::OPTIONS.backoff.base, Duration::from_secs(2));
    assert_eq!(OnlyBase::OPTIONS.backoff.cap, Backoff::DEFAULT.cap);
    assert_eq!(OnlyCap::OPTIONS.backoff.base, Backoff::DEFAULT.base);
    assert_eq!(OnlyCap::OPTIONS.backoff.cap, Duration::from_secs(1));
    assert_eq!(OnlyCap::OPTIONS.max_attempts, 1);
    assert_eq!(OnlyCap::OPTIONS.queue, JobOptions::DEFAULT.queue);
    assert_eq!(OnlyCap::OPTIONS.rate, None);
    assert_eq!(OnlyCap::OPTIONS.breaker, None);

    // A bare unit is one of it; the breaker keys left out take `Breaker::new`'s defaults,
    // documented as 20 attempts, 1m and 5m.
    assert_eq!(
        PerBareUnit::OPTIONS.rate,
        Some(RateLimit::new(10, Duration::from_secs(1)))
    );
    assert_eq!(PerBareUnit::OPTIONS.breaker, Some(Breaker::new(100)));
    assert_eq!(
        Breaker::new(100),
        Breaker {
            failure_percent: 100,
            min_attempts: 20,
            window: Duration::from_secs(60),
            cool_down: Duration::from_secs(300),
        }
    );
    assert_eq!(
        AtTheLimits::OPTIONS.rate,
        Some(RateLimit::new(
            RateLimit::MAX_STARTS,
            Duration::from_millis(1)
        ))
    );
    // The shortest lease the macro takes is the one the worker takes.
    assert_eq!(AtTheLimits::OPTIONS.lease, job::MIN_LEASE);
    assert_eq!(
        AtTheLimits::OPTIONS.breaker,
        Some(Breaker {
            failure_percent: 1,
            window: Duration::from_secs(1),
            cool_down: Breaker::MAX_DURATION,
            ..Breaker::new(1)
        })
    );
    for options in [
        BuildReport::OPTIONS,
        PerBareUnit::OPTIONS,
        AtTheLimits::OPTIONS,
    ] {
        assert_eq!(options.rate.unwrap().problem(), None);
        assert_eq!(options.breaker.unwrap().problem(), None);
    }
}
