//! Command-line arguments. Hand-rolled: a handful of `--flag value` pairs.

use std::str::FromStr;

/// The server used when neither `--database-url` nor `DATABASE_URL` is given.
pub(crate) const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// What the backlog's waiting rows are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WaitingKind {
    /// Same queue, kind and priority as the drained jobs, scheduled 30 days ahead: in the
    /// claim index, never due during the run.
    Future,
    /// Due now (and older than the drained jobs), same queue and priority, of a kind the worker
    /// does not register: the claim has to step over them.
    OtherKind,
}

impl WaitingKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            WaitingKind::Future => "future",
            WaitingKind::OtherKind => "other-kind",
        }
    }
}

/// Parsed arguments; `None` means the workload's default.
#[derive(Debug, Clone)]
pub(crate) struct Args {
    pub(crate) workload: String,
    pub(crate) database_url: String,
    pub(crate) jobs: Option<usize>,
    pub(crate) concurrency: Option<usize>,
    pub(crate) claim_batch: Option<u32>,
    pub(crate) finalize_batch: Option<usize>,
    pub(crate) prefetch: Option<usize>,
    /// Seconds the worker's pruner keeps completed jobs (else a year; soak: twice the interval).
    pub(crate) retention: Option<f64>,
    pub(crate) keep_db: Option<String>,
    pub(crate) runs: usize,
    pub(crate) gap_ms: f64,
    pub(crate) completed: usize,
    pub(crate) waiting: usize,
    pub(crate) waiting_kind: WaitingKind,
    pub(crate) baseline: bool,
    pub(crate) rate: Option<f64>,
    pub(crate) seconds: f64,
    pub(crate) interval: f64,
    pub(crate) vacuum_every: f64,
    /// Experiments on drain's raw loop: another claim or finalize statement, a fixed claim
    /// size, and skipping the worker.
    pub(crate) raw_claim_sql: Option<String>,
    pub(crate) raw_finalize_sql: Option<String>,
    pub(crate) raw_claim_limit: Option<usize>,
    pub(crate) raw_only: bool,
    pub(crate) raw_settings: Vec<String>,
    pub(crate) raw_setup_sql: Option<String>,
}

fn parse<T: FromStr>(flag: &str, value: &str) -> Result<T, String> {
    value
        .parse()
        .map_err(|_| format!("{flag}: cannot parse {value:?}"))
}

impl Args {
    pub(crate) fn parse(args: impl IntoIterator<Item = String>) -> Result<Args, String> {
        let mut args = args.into_iter();
        let workload = args.next().ok_or("no workload given")?;
        let mut parsed = Args {
            workload,
            database_url: std::env::var("DATABASE_URL").unwrap_or_else(|_| DEFAULT_URL.into()),
            jobs: None,
            concurrency: None,
            claim_batch: None,
            finalize_batch: None,
            prefetch: None,
            retention: None,
            keep_db: None,
            runs: 1,
            gap_ms: 20.0,
            completed: 1_000_000,
            waiting: 1_000_000,
            waiting_kind: WaitingKind::Future,
            baseline: true,
            rate: None,
            seconds: 600.0,
            interval: 60.0,
            vacuum_every: 0.0,
            raw_claim_sql: None,
            raw_finalize_sql: None,
            raw_claim_limit: None,
            raw_only: false,
            raw_settings: Vec::new(),
            raw_setup_sql: None,
        };
        while let Some(flag) = args.next() {
            if flag == "--no-baseline" {
                parsed.baseline = false;
                continue;
            }
            if flag == "--raw-only" {
                parsed.raw_only = true;
                continue;
            }
            let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
            let v = value.as_str();
            match flag.as_str() {
                "--jobs" => parsed.jobs = Some(parse(&flag, v)?),
                "--concurrency" => parsed.concurrency = Some(parse(&flag, v)?),
                "--claim-batch" => parsed.claim_batch = Some(parse(&flag, v)?),
                "--finalize-batch" => parsed.finalize_batch = Some(parse(&flag, v)?),
                "--prefetch" => parsed.prefetch = Some(parse(&flag, v)?),
                "--retention" => parsed.retention = Some(parse(&flag, v)?),
                "--keep-db" => parsed.keep_db = Some(value),
                "--database-url" => parsed.database_url = value,
                "--runs" => parsed.runs = parse(&flag, v)?,
                "--gap-ms" => parsed.gap_ms = parse(&flag, v)?,
                "--completed" => parsed.completed = parse(&flag, v)?,
                "--waiting" => parsed.waiting = parse(&flag, v)?,
                "--waiting-kind" => {
                    parsed.waiting_kind = match v {
                        "future" => WaitingKind::Future,
                        "other-kind" => WaitingKind::OtherKind,
                        _ => return Err(format!("{flag}: `future` or `other-kind`, got {v:?}")),
                    }
                }
                "--rate" => parsed.rate = Some(parse(&flag, v)?),
                "--seconds" => parsed.seconds = parse(&flag, v)?,
                "--interval" => parsed.interval = parse(&flag, v)?,
                "--vacuum-every" => parsed.vacuum_every = parse(&flag, v)?,
                "--raw-claim-sql" => parsed.raw_claim_sql = Some(value),
                "--raw-finalize-sql" => parsed.raw_finalize_sql = Some(value),
                "--raw-setup-sql" => parsed.raw_setup_sql = Some(value),
                "--raw-set" => parsed.raw_settings.push(value),
                "--raw-claim-limit" => parsed.raw_claim_limit = Some(parse(&flag, v)?),
                _ => return Err(format!("unknown argument {flag:?}")),
            }
        }
        if parsed.concurrency == Some(0) {
            return Err("--concurrency must be at least 1".into());
        }
        if parsed.jobs == Some(0) {
            return Err("--jobs must be at least 1".into());
        }
        if parsed.runs == 0 {
            return Err("--runs must be at least 1".into());
        }
        if parsed.retention.is_some_and(|r| r.is_nan() || r < 0.0) {
            return Err("--retention must be zero or more seconds".into());
        }
        if parsed.interval <= 0.0 || parsed.seconds <= 0.0 {
            return Err("--seconds and --interval must be positive".into());
        }
        Ok(parsed)
    }

    pub(crate) fn jobs_or(&self, default: usize) -> usize {
        self.jobs.unwrap_or(default)
    }

    pub(crate) fn concurrency_or(&self, default: usize) -> usize {
        self.concurrency.unwrap_or(default)
    }

    /// The worker settings these arguments ask for, over the library defaults. Completed
    /// jobs are kept for a year instead of a day, so the pruner never deletes a kept backlog's
    /// history under a drain (nothing a benchmark finishes is that old).
    pub(crate) fn worker_config(&self) -> job::WorkerConfig {
        let mut config = job::WorkerConfig::default();
        config.pruner.completed_retention = std::time::Duration::from_secs(365 * 24 * 3600);
        if let Some(b) = self.claim_batch {
            config.claim_batch = b;
        }
        if let Some(b) = self.finalize_batch {
            config.finalize_batch = b;
        }
        if let Some(p) = self.prefetch {
            config.prefetch = p;
        }
        if let Some(r) = self.retention {
            config.pruner.completed_retention = std::time::Duration::from_secs_f64(r.max(0.0));
        }
        config
    }
}
