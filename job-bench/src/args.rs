//! Command-line arguments, parsed by clap.

/// The server used when neither `--database-url` nor `DATABASE_URL` is given.
pub(crate) const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// What the backlog's waiting rows are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum WaitingKind {
    /// Same queue, kind and priority as the drained jobs, scheduled 30 days ahead: in the
    /// claim index, never due during the run.
    Future,
    /// Due now (and older than the drained jobs), same queue and priority, of a kind the worker
    /// does not register: the claim has to step over them.
    OtherKind,
    /// Both: --waiting future rows and a tenth as many due rows of the other kind.
    Mixed,
}

impl WaitingKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            WaitingKind::Future => "future",
            WaitingKind::OtherKind => "other-kind",
            WaitingKind::Mixed => "mixed",
        }
    }
}

/// The benchmark's command line (`job-bench --help`); `None` means the workload's default.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "job-bench",
    about = "Throughput and latency benchmarks of the job framework against a real PostgreSQL",
    after_help = WORKLOADS
)]
pub(crate) struct Args {
    /// What to measure: drain, enqueue, enqueue_bulk, latency, backlog or soak (see below).
    pub(crate) workload: String,
    /// The server (else DATABASE_URL, else postgres://postgres@127.0.0.1:5432/test).
    #[arg(long, env = "DATABASE_URL", default_value = DEFAULT_URL)]
    pub(crate) database_url: String,
    /// Jobs to run or insert.
    #[arg(long, value_parser = at_least_one)]
    pub(crate) jobs: Option<usize>,
    /// Worker concurrency (10), or producer connections for enqueue (1).
    #[arg(long, value_parser = at_least_one)]
    pub(crate) concurrency: Option<usize>,
    /// WorkerConfig::claim_batch of the worker (library default).
    #[arg(long)]
    pub(crate) claim_batch: Option<u32>,
    /// WorkerConfig::finalize_batch of the worker (library default).
    #[arg(long)]
    pub(crate) finalize_batch: Option<usize>,
    /// A fixed WorkerConfig::prefetch for the worker (library default: measured, up to 1,000).
    #[arg(long)]
    pub(crate) prefetch: Option<usize>,
    /// Seconds the worker's pruner keeps completed jobs (a year; soak: twice --interval, so
    /// that the pruner works during the soak).
    #[arg(long, value_parser = non_negative)]
    pub(crate) retention: Option<f64>,
    /// Use (and create when missing) database NAME and do not drop it.
    #[arg(long, value_name = "NAME")]
    pub(crate) keep_db: Option<String>,
    /// Drain: worker processes sharing the queue, each with --concurrency slots.
    #[arg(long, default_value_t = 1, value_parser = at_least_one)]
    pub(crate) workers: usize,
    /// Compare: rounds, each running every system once per workload.
    #[arg(long, default_value_t = 5, value_parser = at_least_one)]
    pub(crate) rounds: usize,
    /// Compare: an installed copy of ../shared/bench-peers/graphile (`npm ci` done in it).
    #[arg(long, value_name = "DIR", env = "JOB_BENCH_GRAPHILE")]
    pub(crate) graphile: Option<String>,
    /// Repeat the measurement K times, one line each (drain, backlog).
    #[arg(long, default_value_t = 1, value_parser = at_least_one)]
    pub(crate) runs: usize,
    /// Latency: milliseconds between enqueues.
    #[arg(long, default_value_t = 20.0)]
    pub(crate) gap_ms: f64,
    /// Backlog: completed rows.
    #[arg(long, default_value_t = 1_000_000)]
    pub(crate) completed: usize,
    /// Backlog: waiting rows.
    #[arg(long, default_value_t = 1_000_000)]
    pub(crate) waiting: usize,
    /// Backlog: `future` (same queue and kind, scheduled in 30 days), `other-kind` (due now,
    /// of a kind the worker does not run, same queue) or `mixed` (both: --waiting future rows
    /// and a tenth as many of the other kind).
    #[arg(long, value_enum, default_value_t = WaitingKind::Future)]
    pub(crate) waiting_kind: WaitingKind,
    /// Backlog: skip the empty-table drain it is compared with.
    #[arg(long = "no-baseline", action = clap::ArgAction::SetFalse)]
    pub(crate) baseline: bool,
    /// Soak: jobs per second to produce (else 70% of a quick drain).
    #[arg(long)]
    pub(crate) rate: Option<f64>,
    /// Soak and idle: duration in seconds.
    #[arg(long, default_value_t = 600.0, value_parser = positive)]
    pub(crate) seconds: f64,
    /// Soak: seconds per report line.
    #[arg(long, default_value_t = 60.0, value_parser = positive)]
    pub(crate) interval: f64,
    /// Soak: run VACUUM (ANALYZE) job.jobs every S seconds (0: never).
    #[arg(long, default_value_t = 0.0)]
    pub(crate) vacuum_every: f64,
    /// Experiment: claim with this statement instead of claim.sql (same parameters).
    #[arg(long, value_name = "FILE")]
    pub(crate) raw_claim_sql: Option<String>,
    /// Experiment: finalize with this statement instead of finalize.sql.
    #[arg(long, value_name = "FILE")]
    pub(crate) raw_finalize_sql: Option<String>,
    /// Experiment: ask for L jobs per claim whatever the free slots.
    #[arg(long, value_name = "L")]
    pub(crate) raw_claim_limit: Option<usize>,
    /// Experiment: run only drain's raw loop.
    #[arg(long)]
    pub(crate) raw_only: bool,
    /// Experiment: K raw loops side by side, each a claimer and a completer of its own (the
    /// statements in flight of K workers; 1: the store's loop).
    #[arg(long, value_name = "K", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub(crate) raw_loops: u32,
    /// Experiment: the finalize statement deletes the jobs it finishes; a job of the batch
    /// gone counts as finished.
    #[arg(long)]
    pub(crate) raw_finalize_deletes: bool,
    /// Experiment: a session setting NAME=VALUE on the raw loop's connections (repeatable).
    #[arg(long = "raw-set", value_name = "NAME=VALUE")]
    pub(crate) raw_settings: Vec<String>,
    /// Experiment: run this SQL in the benchmark's database first (e.g. a function the
    /// experiment's claim calls).
    #[arg(long, value_name = "FILE")]
    pub(crate) raw_setup_sql: Option<String>,
}

/// What each workload does, after the options in `--help`.
const WORKLOADS: &str = "\
Workloads:
  drain         pre-enqueue N (20000) no-op jobs in bulk, time --workers worker processes until all are
                finalized; also the bare claim + finalize SQL in the same loop (raw_jobs_per_s)
  enqueue       N (5000) single enqueues, each its own transaction, through the typed helper,
                interleaved with plain single-row INSERTs into a scratch table
  enqueue_bulk  N (100000) jobs through the bulk API
  latency       an idle worker; N (200) jobs enqueued one at a time --gap-ms apart; enqueue
                commit to handler start
  backlog       drain with --completed completed and --waiting waiting rows already in the
                table; reports the worker's peak RSS
  soak          a producer at --rate for --seconds, one line per --interval seconds
  compare       --rounds rounds of: drain (library defaults) and graphile-worker tuned's W1,
                latency and graphile-worker tuned's W3, and a pgbench claim-100 ceiling;
                one line per round and a summary of medians and ratios (needs --graphile DIR)
  idle          one worker with nothing due for it (over --keep-db's backlog) for --seconds:
                the CPU of its process and of its server backends, as % of one core
  drain_sqlite  drain on a fresh SQLite file, the worker in this process (no server)
  latency_sqlite  latency on a fresh SQLite file, the worker in this process";

fn at_least_one(value: &str) -> Result<usize, String> {
    match value.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("must be at least 1, got {value:?}")),
    }
}

fn non_negative(value: &str) -> Result<f64, String> {
    match value.parse::<f64>() {
        Ok(x) if x >= 0.0 => Ok(x),
        _ => Err(format!("must be zero or more, got {value:?}")),
    }
}

fn positive(value: &str) -> Result<f64, String> {
    match value.parse::<f64>() {
        Ok(x) if x > 0.0 => Ok(x),
        _ => Err(format!("must be positive, got {value:?}")),
    }
}

impl Args {
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
            config.prefetch = p.into();
        }
        if let Some(r) = self.retention {
            config.pruner.completed_retention = std::time::Duration::from_secs_f64(r.max(0.0));
        }
        config
    }
}
