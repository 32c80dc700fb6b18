//! The command line, declared with clap.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, Utc};
use clap::{Args, Parser, Subcommand};
use job::{JobFilter, JobState};

/// The most jobs `job list` prints at once: every row is read into memory, its whole error
/// history with it.
pub(crate) const MAX_LIST_LIMIT: u32 = 10_000;

/// Operate the job framework's queue on PostgreSQL.
#[derive(Debug, Parser)]
#[command(name = "job", version, about)]
pub(crate) struct Cli {
    /// The database: `postgres://user@host:port/db`.
    #[arg(long, env = "DATABASE_URL", global = true, hide_env_values = true)]
    pub(crate) database_url: Option<String>,
    /// Print JSON instead of tables.
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// How long a statement may wait for the database (a lock held on the job tables, a busy
    /// server) before the command gives up, exit code 1; the database stops the statement, so
    /// nothing is left waiting. A database that does not answer at all (a network down, a
    /// stopped server) is given up 2s after that. For `migrate`, the wait for a lock, and how
    /// long its session may wait for the command's next statement or its answer (a second
    /// connection watches it, and gives up after 10s without an answer, or this and 2s when
    /// longer): a migration's statement runs as long as the server works on it. 100ms to 1h;
    /// `web` has its own bound.
    #[arg(
        long,
        global = true,
        default_value = "30s",
        value_parser = humantime::parse_duration
    )]
    pub(crate) timeout: Duration,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Create or upgrade the `job` schema (`--print`: write the SQL script instead).
    Migrate {
        /// Print the migrations as one plain SQL script (for psql), without connecting.
        #[arg(long)]
        print: bool,
    },
    /// Jobs per queue and state, the oldest due job's age, dead letters and stuck jobs.
    Stats(FilterArgs),
    /// Jobs matching a filter, oldest first.
    List {
        #[command(flatten)]
        filter: FilterArgs,
        /// Only these states (repeatable).
        #[arg(long = "state", value_parser = parse_state)]
        states: Vec<JobState>,
        /// Only these ids (repeatable).
        #[arg(long = "id")]
        ids: Vec<i64>,
        /// Only jobs finished at or after this instant (RFC 3339).
        #[arg(long)]
        finalized_from: Option<DateTime<Utc>>,
        /// Only jobs finished before this instant (RFC 3339).
        #[arg(long)]
        finalized_to: Option<DateTime<Utc>>,
        /// At most this many jobs: 1 to 10000 (`MAX_LIST_LIMIT`); narrow the listing with
        /// the filters or `--id` to see others.
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// One job: its fields, payload, error history and recorded steps.
    Show {
        /// The job's id.
        id: i64,
    },
    /// Cancel a job: at once when it waits, at its next heartbeat when it runs.
    Cancel {
        /// The job's id.
        id: i64,
    },
    /// Put dead letters back to `available` with fresh attempts.
    Redrive(DeadArgs),
    /// Delete dead letters (asks first unless `--yes`).
    Purge {
        #[command(flatten)]
        dead: DeadArgs,
        /// Do not ask.
        #[arg(long, short)]
        yes: bool,
    },
    /// Stop workers from taking a queue's or a kind's jobs.
    Pause(PauseArgs),
    /// Let workers take a paused queue's or kind's jobs again.
    Resume(PauseArgs),
    /// What is paused.
    Paused,
    /// Enqueue a job of KIND with a JSON object as its payload.
    Enqueue(EnqueueArgs),
    /// Reconcile the queue: counts per state, leases expired and overdue, steps without a
    /// job, dead letters per class. Exits with 2 when something is wrong.
    Check {
        /// The lease a job holds (workers' default 30s): a lease expired for longer than this
        /// means no rescuer is running. 30ms to 100 years.
        #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
        lease: Duration,
    },
    /// Serve the dashboard.
    Web {
        /// Where to listen.
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
        /// Show and act on this tenant's jobs only (a name as the framework accepts it).
        #[arg(long)]
        tenant: Option<String>,
        /// A file holding the operator token (else `JOB_OPERATOR_TOKEN`); without a token the
        /// dashboard is read-only.
        #[arg(long)]
        operator_token_file: Option<PathBuf>,
        /// A host name the dashboard answers to (repeat for several); a request to another
        /// name is refused, which stops DNS rebinding. Default: `localhost`, `127.0.0.1` and
        /// `[::1]` when listening on a loopback address, any name otherwise.
        #[arg(long = "allowed-host", value_name = "NAME")]
        allowed_hosts: Vec<String>,
        /// Mark the session cookie `Secure` (behind HTTPS, such as a TLS-terminating proxy).
        #[arg(long)]
        secure_cookie: bool,
        /// How many reverse proxies you run in front of it append to `X-Forwarded-For`: logins
        /// are then counted per client address they recorded, so that one client guessing
        /// the token locks out only itself. 0 (the default) ignores the header, which clients
        /// can write.
        #[arg(long, value_name = "N", default_value_t = 0)]
        forwarded_hops: u8,
    },
}

/// The filter options shared by `stats`, `list`, `redrive` and `purge`.
#[derive(Debug, Clone, Args)]
pub(crate) struct FilterArgs {
    /// Only this kind.
    #[arg(long)]
    pub(crate) kind: Option<String>,
    /// Only this queue.
    #[arg(long)]
    pub(crate) queue: Option<String>,
    /// Only this tenant.
    #[arg(long)]
    pub(crate) tenant: Option<String>,
    /// Only jobs carrying this tag.
    #[arg(long)]
    pub(crate) tag: Option<String>,
}

impl FilterArgs {
    pub(crate) fn filter(&self) -> JobFilter {
        JobFilter {
            kind: self.kind.clone(),
            queue: self.queue.clone(),
            tenant: self.tenant.clone(),
            tag: self.tag.clone(),
            ..JobFilter::default()
        }
    }

    /// The first option given that no job's name can match, said naming it: empty (where
    /// leaving it out matches any: `--queue "$QUEUE"` with `QUEUE` unset), or breaking the rule
    /// every kind, queue, tenant and tag is held to where it is stored ([`job::name_problem`],
    /// the enqueue door's: at most 128 bytes, no whitespace, control or format character).
    /// Such a filter matched nothing, silently.
    pub(crate) fn problem(&self) -> Option<String> {
        [
            ("kind", &self.kind),
            ("queue", &self.queue),
            ("tenant", &self.tenant),
            ("tag", &self.tag),
        ]
        .into_iter()
        .find_map(|(option, value)| {
            let value = value.as_deref()?;
            if value.trim().is_empty() {
                return Some(format!(
                    "--{option} must not be empty (no {option} is): leave it out to match any \
                     {option}"
                ));
            }
            job::name_problem(value).map(|problem| {
                format!(
                    "--{option} {problem}: no {option} can have such a name, so it would match \
                     nothing"
                )
            })
        })
    }

    fn is_empty(&self) -> bool {
        self.kind.is_none() && self.queue.is_none() && self.tenant.is_none() && self.tag.is_none()
    }
}

/// Which dead letters `redrive` and `purge` act on.
#[derive(Debug, Clone, Args)]
pub(crate) struct DeadArgs {
    /// These dead letters.
    pub(crate) ids: Vec<i64>,
    #[command(flatten)]
    pub(crate) filter: FilterArgs,
    /// Every dead letter (needed when no id or filter is given).
    #[arg(long)]
    pub(crate) all: bool,
    /// At most this many: 1 to 10000 (`MAX_LIST_LIMIT`), and no fewer than the ids named;
    /// run the command again for more.
    #[arg(long, default_value_t = 1000)]
    pub(crate) limit: u32,
}

impl DeadArgs {
    /// The filter, or an error when nothing narrows it and `--all` is not given.
    pub(crate) fn filter(&self) -> Result<JobFilter, String> {
        if self.ids.is_empty() && self.filter.is_empty() && !self.all {
            return Err("name dead letters by id, narrow them with --kind/--queue/--tenant/--tag, or say --all".into());
        }
        Ok(JobFilter {
            ids: self.ids.clone(),
            limit: Some(self.limit),
            ..self.filter.filter()
        })
    }
}

#[derive(Debug, Clone, Args)]
#[group(required = true, multiple = false)]
pub(crate) struct PauseArgs {
    /// A queue.
    #[arg(long)]
    pub(crate) queue: Option<String>,
    /// A kind.
    #[arg(long)]
    pub(crate) kind: Option<String>,
}

#[derive(Debug, Clone, Args)]
pub(crate) struct EnqueueArgs {
    /// The job's kind.
    pub(crate) kind: String,
    /// Its payload: a JSON object.
    pub(crate) payload: String,
    /// The queue. Defaults to `default`.
    #[arg(long)]
    pub(crate) queue: Option<String>,
    /// The priority (0..32767, lower runs first).
    #[arg(long)]
    pub(crate) priority: Option<i16>,
    /// Attempts in all.
    #[arg(long)]
    pub(crate) max_attempts: Option<i32>,
    /// Run after this delay (`10m`, `1h 30m`).
    #[arg(long = "in", value_parser = humantime::parse_duration, conflicts_with = "run_at")]
    pub(crate) delay: Option<Duration>,
    /// Run at this instant (RFC 3339).
    #[arg(long)]
    pub(crate) run_at: Option<DateTime<Utc>>,
    /// Never start it after this delay from now.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub(crate) deadline_in: Option<Duration>,
    /// A unique key: at most one active job of the kind holds it.
    #[arg(long)]
    pub(crate) unique_key: Option<String>,
    /// A tag (repeatable).
    #[arg(long = "tag")]
    pub(crate) tags: Vec<String>,
    /// The tenant.
    #[arg(long)]
    pub(crate) tenant: Option<String>,
    /// The payload's version.
    #[arg(long)]
    pub(crate) payload_version: Option<i32>,
}

fn parse_state(s: &str) -> Result<JobState, String> {
    s.parse::<JobState>().map_err(|_| {
        format!(
            "not a job state: one of {}",
            JobState::ALL.map(JobState::as_str).join(", ")
        )
    })
}
