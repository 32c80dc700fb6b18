//! What each verb does, through the framework's public API only (`Admin`, `PgStore`'s operator
//! reads, `job_postgres::enqueue`, the migrations).

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::time::Duration;

use job::{Admin, Cancelled, JobFilter, JobState, NewJob, Pause, RunAt, Store};
use job_postgres::{Check, PgStore};
use serde_json::json;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::Connection;

use crate::cli::{Cli, Command, DeadArgs, EnqueueArgs, FilterArgs, PauseArgs, MAX_LIST_LIMIT};
use crate::output::{
    self, add_row, numeric, print, print_json, table, when, JobView, StdoutError, StepView,
};
use crate::wait::Bound;

/// The statements `PgStore::check` sends one after the other (the migrations it lacks, its
/// counts, leases, orphan steps, stranded pending jobs and dead-letter classes), each given
/// `--timeout` by the server.
const CHECK_STATEMENTS: u32 = 6;
/// The statements `Admin::stats` sends (counts, the oldest due job, stuck executions).
const STATS_STATEMENTS: u32 = 3;
/// The statements of a redrive: its transaction's three (its lock, the redrive, the order of
/// keys), tried up to three times when a key was taken meanwhile or a deadlock broke it.
const REDRIVE_STATEMENTS: u32 = 3 * 3;
/// The statements of a cancel: the cancel, then the job's state when it did not cancel it.
const CANCEL_STATEMENTS: u32 = 2;

pub(crate) type Error = Box<dyn std::error::Error + Send + Sync>;

/// The most queues `stats` prints as rows of its table, the first by name (as the dashboard's
/// queues page counts the first 1,000): producers may put ids in queue names, and a table of
/// 200,000 rows is read by nobody. The line after the table says how many more there are and
/// what they hold; `--json` lists every queue.
const STATS_QUEUES: usize = 1_000;

/// Runs one command; the exit code says how it went (0 fine, 1 failed or not found, 2 `check`
/// found something wrong). A statement the database stopped at `--timeout` is said as such,
/// and so is a request the database did not answer at all ([`Bound`]).
pub(crate) async fn run(cli: Cli) -> Result<ExitCode, Error> {
    let (setting, timeout) = (crate::wait::setting(&cli.command), cli.timeout);
    run_command(cli)
        .await
        .map_err(|e| crate::wait::explained(e, setting, timeout))
}

async fn run_command(cli: Cli) -> Result<ExitCode, Error> {
    if let Command::Migrate { print: true } = cli.command {
        output::print_raw(&job_postgres::schema_script())?;
        return Ok(ExitCode::SUCCESS);
    }
    check_options(&cli.command)?;
    if let Some(problem) = crate::wait::timeout_problem(cli.timeout) {
        return Err(problem.into());
    }
    let url = cli
        .database_url
        .clone()
        .ok_or("no database: give --database-url or set DATABASE_URL")?;
    let store = connect(&url, &cli.command, cli.timeout).await?;
    let bound = Bound::new(&cli.command, cli.timeout);
    let json_out = cli.json;
    match cli.command {
        Command::Migrate { .. } => {
            // Watched by the store (see `PgStore::migrate_with_idle_limit`): its session may
            // wait for the command as long as any request's answer may take.
            store
                .migrate_with_idle_limit(cli.timeout.saturating_add(crate::wait::MARGIN))
                .await?;
            say(
                json_out,
                json!({"migrated": true}),
                "the job schema is up to date",
            )?;
        }
        Command::Stats(filter) => stats(&store, bound, &filter.filter(), json_out).await?,
        Command::List {
            filter,
            states,
            ids,
            finalized_from,
            finalized_to,
            limit,
        } => {
            let filter = JobFilter {
                states,
                ids,
                finalized_from,
                finalized_to,
                limit: Some(limit),
                ..filter.filter()
            };
            if json_out {
                list_json(&store, bound, &filter).await?;
            } else {
                // The table shows no payload: read none (1 MiB payloads, 100 jobs).
                let jobs = bound.answer(store.list_summaries(&filter)).await?;
                if jobs.is_empty() {
                    print("no matching jobs")?;
                } else {
                    print(output::jobs_table(&jobs))?;
                }
            }
        }
        Command::Show { id } => return show(&store, bound, id, json_out).await,
        Command::Cancel { id } => {
            let outcome = bound.answer_of(CANCEL_STATEMENTS, store.cancel(id)).await?;
            let (text, code) = match outcome {
                Cancelled::Now => ("cancelled".to_owned(), 0),
                Cancelled::Requested => (
                    "cancellation requested: it stops at its worker's next heartbeat".to_owned(),
                    0,
                ),
                // Cancelling again what is cancelled is done; a job that completed or became a
                // dead letter was not cancelled, and a script must not read that as success.
                Cancelled::AlreadyFinished(JobState::Cancelled) => {
                    ("already finished: cancelled".to_owned(), 0)
                }
                Cancelled::AlreadyFinished(s) => {
                    (format!("not cancelled: it already finished as {s}"), 1)
                }
                Cancelled::NotFound => (format!("no job {id}"), 1),
            };
            let key = match outcome {
                Cancelled::Now => "cancelled",
                Cancelled::Requested => "requested",
                Cancelled::AlreadyFinished(_) => "already_finished",
                Cancelled::NotFound => "not_found",
            };
            if code != 0 && !json_out {
                // Like `show`: a missing or finished job is an error, said on stderr.
                say!("job: {text}");
            } else {
                say(json_out, json!({"id": id, "outcome": key}), &text)?;
            }
            return Ok(ExitCode::from(code));
        }
        Command::Redrive(dead) => return redrive(&store, bound, &dead, json_out).await,
        Command::Purge { dead, yes } => return purge(&store, bound, &dead, yes, json_out).await,
        Command::Pause(what) => {
            let what = pause_target(what);
            pausable(&what)?;
            let changed = bound.answer(store.pause(&what)).await?;
            let text = if changed { "paused" } else { "already paused" };
            say(
                json_out,
                json!({"scope": what.scope(), "name": what.name(), "changed": changed}),
                &format!("{} {}: {text}", what.scope(), what.name()),
            )?;
        }
        Command::Resume(what) => {
            // Not `pausable`: a pause written by hand under a name no queue or kind can have
            // is resumed too; the store refuses such a name when no pause holds it.
            let what = pause_target(what);
            let changed = match bound.answer(store.resume(&what)).await {
                Ok(changed) => changed,
                // No pause held the name, which no queue or kind can have: said as `pause`
                // says it, naming the option.
                Err(e) => return Err(pausable(&what).err().unwrap_or(e)),
            };
            let text = if changed { "resumed" } else { "was not paused" };
            say(
                json_out,
                json!({"scope": what.scope(), "name": what.name(), "changed": changed}),
                &format!("{} {}: {text}", what.scope(), what.name()),
            )?;
        }
        Command::Paused => {
            let paused = bound.answer(store.pauses()).await?;
            let until = |p: &job::PauseEntry| p.resume_at.map(|at| at.to_rfc3339());
            if json_out {
                let list: Vec<_> = paused
                    .iter()
                    .map(|p| {
                        json!({
                            "scope": p.what.scope(),
                            "name": p.what.name(),
                            "paused_by": p.paused_by.as_str(),
                            "reason": p.reason,
                            "paused_at": p.paused_at.to_rfc3339(),
                            "resume_at": until(p),
                        })
                    })
                    .collect();
                print_json(&list)?;
            } else if paused.is_empty() {
                print("nothing is paused")?;
            } else {
                let mut t = table(["scope", "name", "by", "until", "reason"]);
                for p in &paused {
                    add_row(
                        &mut t,
                        [
                            p.what.scope().to_owned(),
                            p.what.name().to_owned(),
                            p.paused_by.as_str().to_owned(),
                            until(p).unwrap_or_else(|| "resumed".to_owned()),
                            p.reason.clone().unwrap_or_default(),
                        ],
                    );
                }
                print(&t)?;
            }
        }
        Command::Enqueue(args) => {
            let id = enqueue(&store, bound, args).await?;
            // The job is in the queue whatever happens to its id on the way out: said, so
            // that a script does not enqueue it again for want of an answer.
            say(json_out, json!({"id": id}), &id.to_string()).map_err(|e| {
                format!("job {id} was enqueued, but its id could not be printed: {e}")
            })?;
        }
        Command::Check { lease } => {
            let check = bound
                .answer_of(CHECK_STATEMENTS, store.check(lease))
                .await?;
            print_check(&check, json_out)?;
            if !check.problems().is_empty() {
                return Ok(ExitCode::from(2));
            }
        }
        Command::Web {
            listen,
            tenant,
            operator_token_file,
            allowed_hosts,
            secure_cookie,
            forwarded_hops,
        } => {
            let config = job_web::DashboardConfig {
                forwarded_hops,
                ..web_config(listen, allowed_hosts, secure_cookie)
            };
            web(store, listen, tenant, operator_token_file, config).await?
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Refuses, naming the option, values clap's types let through but the command cannot use;
/// checked before connecting.
fn check_options(command: &Command) -> Result<(), Error> {
    if let Some(problem) = filter_of(command).and_then(FilterArgs::problem) {
        return Err(problem.into());
    }
    match command {
        // The shortest lease a worker takes: a shorter one, zero above all, would count every
        // lease that just expired as overdue.
        Command::Check { lease } if *lease < job::MIN_LEASE => Err(format!(
            "--lease must be at least 30ms (the shortest lease a worker takes), got {}",
            humantime::format_duration(*lease)
        )
        .into()),
        Command::Check { lease } if *lease > job::MAX_DURATION => Err(format!(
            "--lease must be at most 100 years (36500 days, the framework's MAX_DURATION), \
             got {}",
            humantime::format_duration(*lease)
        )
        .into()),
        Command::List { limit, .. } if !(1..=MAX_LIST_LIMIT).contains(limit) => Err(format!(
            "--limit must be from 1 to {MAX_LIST_LIMIT}, got {limit}: narrow the listing with \
             --state, --kind, --queue, --tenant, --tag, --finalized-from/--finalized-to or --id"
        )
        .into()),
        // redrive and purge read what they match (purge's prompt whole rows): bounded like a
        // listing, and run again for more.
        Command::Redrive(dead) | Command::Purge { dead, .. }
            if !(1..=MAX_LIST_LIMIT).contains(&dead.limit) =>
        {
            Err(format!(
                "--limit must be from 1 to {MAX_LIST_LIMIT}, got {}: run the command again for \
                 the dead letters after those",
                dead.limit
            )
            .into())
        }
        // Named ids beyond the limit would be neither read nor acted on: reported as not dead
        // letters by redrive, and silently left by `purge --yes`.
        Command::Redrive(dead) | Command::Purge { dead, .. }
            if distinct(&dead.ids) > dead.limit as usize =>
        {
            Err(too_many_ids(distinct(&dead.ids), dead.limit))
        }
        // The ids past the limit were neither listed nor mentioned: `--limit 1 --id 1 --id 4`
        // printed job 1 alone.
        Command::List { ids, limit, .. } if distinct(ids) > *limit as usize => {
            Err(too_many_ids(distinct(ids), *limit))
        }
        // Refused before connecting, naming the option as given (the store's check names the
        // filter's field, after the connect).
        Command::List {
            finalized_from,
            finalized_to,
            ..
        } if out_of_range(*finalized_from)
            .or(out_of_range(*finalized_to))
            .is_some() =>
        {
            let (option, at) = match out_of_range(*finalized_from) {
                Some(at) => ("--finalized-from", at),
                None => (
                    "--finalized-to",
                    out_of_range(*finalized_to).unwrap_or_default(),
                ),
            };
            Err(format!(
                "{option} must be from 0001-01-01 to 9999-12-31 (UTC), got {at}: no job \
                 carries a time outside it"
            )
            .into())
        }
        Command::List {
            finalized_from: Some(from),
            finalized_to: Some(to),
            ..
        } if from >= to => Err(format!(
            "--finalized-from ({from}) must be before --finalized-to ({to}): the range \
             includes its start, not its end"
        )
        .into()),
        // An empty name matches no `Host`: the dashboard would refuse every request (421).
        Command::Web { allowed_hosts, .. } if allowed_hosts.iter().any(|h| h.trim().is_empty()) => {
            Err(
                "--allowed-host must not be empty: leave it out to answer to the default \
                 names"
                    .into(),
            )
        }
        // The rule the framework applies to every tenant it stores or filters by.
        Command::Web {
            tenant: Some(tenant),
            ..
        } => match job::name_problem(tenant) {
            Some(problem) => Err(format!("--tenant {problem}").into()),
            None => Ok(()),
        },
        _ => Ok(()),
    }
}

/// The filter options of `command`, if it takes them.
fn filter_of(command: &Command) -> Option<&FilterArgs> {
    match command {
        Command::Stats(filter) | Command::List { filter, .. } => Some(filter),
        Command::Redrive(dead) | Command::Purge { dead, .. } => Some(&dead.filter),
        _ => None,
    }
}

/// `at`, when it is outside the years 1 to 9999, which no job's time is (`job::EARLIEST_TIME`
/// to `job::LATEST_TIME`).
fn out_of_range(
    at: Option<chrono::DateTime<chrono::Utc>>,
) -> Option<chrono::DateTime<chrono::Utc>> {
    use chrono::Datelike;
    at.filter(|at| !(1..=9999).contains(&at.year()))
}

/// The refusal of `n` ids named with a `--limit` below them.
fn too_many_ids(n: usize, limit: u32) -> Error {
    let advice = if n <= MAX_LIST_LIMIT as usize {
        format!("give --limit {n}, or name them over several commands")
    } else {
        format!("name at most {MAX_LIST_LIMIT} per command")
    };
    format!("{n} ids named, more than --limit {limit}: {advice}").into()
}

/// How many different ids `ids` holds.
fn distinct(ids: &[i64]) -> usize {
    ids.iter().collect::<std::collections::BTreeSet<_>>().len()
}

/// How long connecting to the database may take before the command gives up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The store at `url`, connected now: one connection is opened first, so that a refused
/// connection, a failed login or a missing database is reported at once with its cause and
/// where it was looked for (the pool would retry a refused connection for its whole acquire
/// timeout, then say only that it timed out). The password is never shown. `migrate`'s pool
/// holds one connection, the session its watch looks at.
async fn connect(url: &str, command: &Command, timeout: Duration) -> Result<PgStore, Error> {
    // sqlx reads any scheme as PostgreSQL's: `mysql://…` would be tried as a PostgreSQL server.
    if !["postgres://", "postgresql://"].iter().any(|scheme| {
        url.get(..scheme.len())
            .is_some_and(|s| s.eq_ignore_ascii_case(scheme))
    }) {
        let scheme: String = url
            .split("://")
            .next()
            .unwrap_or("")
            .chars()
            .take(40)
            .collect();
        return Err(format!(
            "--database-url is not a PostgreSQL URL: it must start with postgres:// or \
             postgresql://, got `{}`",
            output::printable(&scheme)
        )
        .into());
    }
    let options: PgConnectOptions = url
        .parse()
        .map_err(|e| format!("--database-url is not a PostgreSQL URL: {e}"))?;
    let options = crate::wait::bounded(options, command, timeout);
    let database = match options.get_database() {
        Some(db) => format!("database `{db}`"),
        None => "the user's default database".to_owned(),
    };
    let target = match options.get_socket() {
        Some(dir) => format!("{database} on socket {}", dir.display()),
        None => format!(
            "{database} on {}:{}",
            options.get_host(),
            options.get_port()
        ),
    };
    let target = format!("{target} as `{}`", options.get_username());
    let probe = tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect_with(&options))
        .await
        .map_err(|_| format!("cannot connect to {target}: no answer within {CONNECT_TIMEOUT:?}"))?
        .map_err(|e| format!("cannot connect to {target}: {e}"))?;
    let _ = probe.close().await;
    let mut pool = job_postgres::pool_options().acquire_timeout(CONNECT_TIMEOUT);
    if let Command::Migrate { .. } = command {
        pool = pool.max_connections(1);
    }
    let pool = pool
        .connect_with(options)
        .await
        .map_err(|e| format!("cannot connect to {target}: {e}"))?;
    Ok(PgStore::new(pool))
}

/// Prints `value` with `--json`, else `text`.
fn say(json_out: bool, value: serde_json::Value, text: &str) -> Result<(), StdoutError> {
    if json_out {
        print_json(&value)
    } else {
        print(text)
    }
}

/// What to pause or resume.
fn pause_target(args: PauseArgs) -> Pause {
    match (args.queue, args.kind) {
        (Some(q), _) => Pause::Queue(q),
        (None, Some(k)) => Pause::Kind(k),
        // clap's group makes one of them required.
        (None, None) => unreachable!("clap requires --queue or --kind"),
    }
}

/// Refused, naming the option, when no queue or kind can have the name (the store refuses it
/// too, but would not say which option gave it).
fn pausable(what: &Pause) -> Result<(), Error> {
    match job::name_problem(what.name()) {
        Some(problem) => Err(format!("--{} {problem}", what.scope()).into()),
        None => Ok(()),
    }
}

async fn stats(
    store: &PgStore,
    bound: Bound,
    filter: &JobFilter,
    json_out: bool,
) -> Result<(), Error> {
    let stats = bound
        .answer_of(STATS_STATEMENTS, store.stats(filter))
        .await?;
    let paused = bound.answer(store.paused()).await?;
    if json_out {
        let counts: Vec<_> = stats
            .counts
            .iter()
            .map(|c| json!({"queue": c.queue, "state": c.state.as_str(), "count": c.count}))
            .collect();
        let paused: Vec<_> = paused
            .iter()
            .map(|p| json!({"scope": p.scope(), "name": p.name()}))
            .collect();
        print_json(&json!({
            "counts": counts,
            "oldest_available_age_ms": stats.oldest_available_age.map(|d| d.as_millis() as u64),
            "dead_letters": stats.dead_letters,
            "stuck": stats.stuck,
            "paused": paused,
        }))?;
        return Ok(());
    }
    // One pass over the counts (by queue, then state), one row per queue in the order the
    // database gave them: a producer may put ids in queue names, and a lookup per queue and
    // state made 200,000 queues take minutes.
    let mut rows: Vec<(&str, [u64; JobState::ALL.len()])> = Vec::new();
    let mut row_of: HashMap<&str, usize> = HashMap::new();
    for c in &stats.counts {
        let at = *row_of.entry(c.queue.as_str()).or_insert_with(|| {
            rows.push((c.queue.as_str(), [0; JobState::ALL.len()]));
            rows.len() - 1
        });
        let state = JobState::ALL
            .iter()
            .position(|s| *s == c.state)
            .expect("every state is in JobState::ALL");
        rows[at].1[state] += c.count;
    }
    let paused_queues: HashSet<&str> = paused
        .iter()
        .filter_map(|p| match p {
            Pause::Queue(name) => Some(name.as_str()),
            _ => None,
        })
        .collect();
    let (shown, hidden) = rows.split_at(rows.len().min(STATS_QUEUES));
    let mut header = vec!["queue".to_owned()];
    header.extend(JobState::ALL.iter().map(|s| s.to_string()));
    let mut t = table(header);
    for (queue, counts) in shown {
        let mut row = vec![queue.to_string()];
        if paused_queues.contains(queue) {
            row[0].push_str(" (paused)");
        }
        row.extend(counts.iter().map(u64::to_string));
        add_row(&mut t, row);
    }
    let counts: Vec<usize> = (1..=JobState::ALL.len()).collect();
    numeric(&mut t, &counts);
    if shown.is_empty() {
        print("no jobs")?;
    } else {
        print(&t)?;
    }
    if !hidden.is_empty() {
        let jobs: u64 = hidden.iter().flat_map(|(_, counts)| counts).sum();
        print(format_args!(
            "… and {} more queue(s) not shown, holding {jobs} job(s): the table shows the \
             first {STATS_QUEUES} queues by name; narrow with --queue, or --json lists every \
             queue",
            hidden.len()
        ))?;
    }
    let oldest = stats
        .oldest_available_age
        .map(|d| {
            humantime::format_duration(std::time::Duration::from_secs(d.as_secs())).to_string()
        })
        .unwrap_or_else(|| "none due".to_owned());
    print(format_args!(
        "oldest due job waiting: {oldest}; dead letters: {}; stuck: {}",
        stats.dead_letters, stats.stuck
    ))?;
    let in_table: HashSet<&str> = shown.iter().map(|(queue, _)| *queue).collect();
    // A paused queue with no jobs, or past the table's first queues, has no row to mark: a line
    // each, as many as the table's rows at most (50,000 pauses printed 50,000 lines).
    let lines: Vec<String> = paused
        .iter()
        .filter_map(|p| match p {
            Pause::Kind(name) => Some(format!("kind {name} is paused")),
            Pause::Queue(name) if !in_table.contains(name.as_str()) => {
                Some(format!("queue {name} is paused"))
            }
            _ => None,
        })
        .collect();
    for line in lines.iter().take(STATS_QUEUES) {
        print(line)?;
    }
    if lines.len() > STATS_QUEUES {
        print(format_args!(
            "… and {} more pause(s) not shown: `job paused` lists every pause",
            lines.len() - STATS_QUEUES
        ))?;
    }
    Ok(())
}

async fn show(store: &PgStore, bound: Bound, id: i64, json_out: bool) -> Result<ExitCode, Error> {
    let Some(job) = bound.answer(store.get(id)).await? else {
        say!("job: no job {id}");
        return Ok(ExitCode::FAILURE);
    };
    let steps = bound.answer(store.steps(id)).await?;
    let exact = exact_texts(store, bound, &[id]).await?;
    let view = JobView::new(&job, exact.get(&id));
    if json_out {
        let steps: Vec<StepView> = steps.iter().map(StepView::from).collect();
        // A struct, not `json!`, which would make the view a `serde_json::Value` and round
        // the numbers it holds as the database wrote them.
        #[derive(serde::Serialize)]
        struct Shown<'a> {
            job: JobView<'a>,
            steps: Vec<StepView<'a>>,
        }
        print_json(&Shown { job: view, steps })?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut t = table(["field", "value"]);
    let state = match job.stuck_since {
        Some(since) => format!("{} (stuck since {})", job.state, when(Some(since))),
        None => job.state.to_string(),
    };
    let rows: Vec<(&str, String)> = vec![
        ("id", job.id.to_string()),
        ("state", state),
        (
            "kind",
            format!("{} (payload v{})", job.kind, job.payload_version),
        ),
        (
            "queue",
            format!("{} (priority {})", job.queue, job.priority),
        ),
        ("tenant", job.tenant.clone().unwrap_or_default()),
        ("tags", job.tags.join(", ")),
        (
            "attempt",
            format!("{} of {}", job.attempt, job.max_attempts),
        ),
        ("enqueued", when(Some(job.created_at))),
        ("run at", when(Some(job.run_at))),
        ("deadline", when(job.deadline)),
        ("finished", when(job.finalized_at)),
        ("unique key", job.unique_key.clone().unwrap_or_default()),
        (
            "lease",
            match &job.locked_by {
                Some(by) => format!("{by} until {}", when(job.locked_until)),
                None => String::new(),
            },
        ),
        (
            "cancel requested",
            if job.cancel_requested { "yes" } else { "" }.to_owned(),
        ),
    ];
    for (k, v) in rows.into_iter().filter(|(_, v)| !v.is_empty()) {
        add_row(&mut t, [k.to_owned(), v]);
    }
    print(&t)?;
    let (payload, progress, result) = view.values();
    print("payload:")?;
    print(payload.pretty())?;
    if let Some(progress) = progress {
        print(format_args!("progress: {}", progress.pretty()))?;
    }
    if let Some(result) = result {
        print("result:")?;
        print(result.pretty())?;
    }
    if job.errors.is_empty() {
        print("error history: none")?;
    } else {
        print("error history:")?;
        let mut t = table(["attempt", "at", "class", "message"]);
        for e in &job.errors {
            add_row(
                &mut t,
                [
                    e.attempt.to_string(),
                    when(Some(e.at)),
                    e.class.clone(),
                    e.message.clone(),
                ],
            );
        }
        numeric(&mut t, &[0]);
        print(&t)?;
    }
    if steps.is_empty() {
        print("steps: none recorded")?;
    } else {
        print("steps:")?;
        let mut t = table(["step", "attempt", "recorded", "output"]);
        for s in &steps {
            add_row(
                &mut t,
                [
                    s.name.clone(),
                    s.attempt.to_string(),
                    when(Some(s.recorded_at)),
                    StepView::from(s).output.line(),
                ],
            );
        }
        numeric(&mut t, &[1]);
        print(&t)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The payload, progress and result of the jobs `ids` as the database writes them (`jsonb`'s
/// text: numbers as stored; see [`output::Exact`]), by id. A job gone since is not in it. Not
/// `jsonb_pretty`, which lays a value out on the server, where indentation can make its text a
/// hundred times the value's.
async fn exact_texts(
    store: &PgStore,
    bound: Bound,
    ids: &[i64],
) -> Result<HashMap<i64, output::ExactTexts>, Error> {
    type Texts = (i64, Option<String>, Option<String>, Option<String>);
    let rows: Vec<Texts> = bound
        .answer(
            sqlx::query_as(
                "SELECT id, payload::text, progress::text, result::text \
                 FROM job.jobs WHERE id = ANY($1)",
            )
            .bind(ids)
            .fetch_all(store.pool()),
        )
        .await?;
    Ok(rows
        .into_iter()
        .map(|(id, payload, progress, result)| {
            (id, output::ExactTexts::new(payload, progress, result))
        })
        .collect())
}

/// How many whole rows `list --json` holds at once: a row may carry a payload of megabytes (and
/// an error history of up to 2 MiB), and `--limit` allows 10,000 rows.
const LIST_JSON_CHUNK: usize = 16;

/// `list --json`: the matching ids from the summaries, then the whole rows a few at a time,
/// each written out before the next are read, so that memory holds a chunk, not the listing.
/// The output is the JSON array `print_json` would write of them all. A job deleted between
/// the two reads (purged, pruned) is left out; one that changed meanwhile (finished, say) is
/// written as it is at the second read, even if it no longer matches the filter.
async fn list_json(store: &PgStore, bound: Bound, filter: &JobFilter) -> Result<(), Error> {
    let ids: Vec<i64> = bound
        .answer(store.list_summaries(filter))
        .await?
        .iter()
        .map(|job| job.id)
        .collect();
    let mut array = output::JsonArray::start()?;
    for chunk in ids.chunks(LIST_JSON_CHUNK) {
        let rows = bound
            .answer(store.list(&JobFilter {
                limit: Some(LIST_JSON_CHUNK as u32),
                ..JobFilter::ids(chunk.iter().copied())
            }))
            .await?;
        let ids: Vec<i64> = rows.iter().map(|row| row.id).collect();
        let exact = exact_texts(store, bound, &ids).await?;
        for row in &rows {
            array.push(&JobView::new(row, exact.get(&row.id)))?;
        }
    }
    array.finish()?;
    Ok(())
}

/// Redrives dead letters; an id named that was neither redriven nor skipped (not a dead
/// letter, a dead letter the filter leaves out, or no such job) is said with why, and so is a
/// dead letter skipped for its unique key (it stays a dead letter): either makes the exit
/// code 1.
async fn redrive(
    store: &PgStore,
    bound: Bound,
    dead: &DeadArgs,
    json_out: bool,
) -> Result<ExitCode, Error> {
    let filter = dead.filter()?;
    let out = bound
        .answer_of(REDRIVE_STATEMENTS, store.redrive(&filter))
        .await?;
    let not_dead: Vec<i64> = dead
        .ids
        .iter()
        .copied()
        .filter(|id| !out.redriven.contains(id) && !out.skipped.iter().any(|(s, _)| s == id))
        .collect();
    let code = if not_dead.is_empty() && out.skipped.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    };
    if json_out {
        let skipped: Vec<_> = out
            .skipped
            .iter()
            .map(|(id, holder)| json!({"id": id, "held_by": holder}))
            .collect();
        print_json(&json!({
            "redriven": out.redriven,
            "skipped": skipped,
            "not_redriven": not_dead,
            // Its name before `not_redriven`, kept for scripts that read it.
            "not_dead_letters": not_dead,
        }))?;
        return Ok(code);
    }
    print(format_args!(
        "redriven: {} job(s) {:?}",
        out.redriven.len(),
        out.redriven
    ))?;
    for (id, holder) in &out.skipped {
        print(format_args!(
            "skipped {id}: active job {holder} holds its unique key"
        ))?;
    }
    if !not_dead.is_empty() {
        let absent =
            left_behind(store, bound, &dead.filter.filter(), &not_dead, "redriven").await?;
        for id in absent {
            say!("job: {id} was not redriven: no such job");
        }
    }
    Ok(code)
}

/// Deletes dead letters. Asked first (unless `--yes`), it deletes exactly the ones it listed
/// in its question, not what the filter matches once answered. It says which ids it could not
/// delete (those it listed that are no longer dead letters or were held by another operation,
/// and ids named on the command line that are not dead letters, or no job at all), and then
/// exits 1, as `redrive` does.
async fn purge(
    store: &PgStore,
    bound: Bound,
    dead: &DeadArgs,
    yes: bool,
    json_out: bool,
) -> Result<ExitCode, Error> {
    let filter = dead.filter()?;
    let missing = missing(store, bound, &dead.ids).await?;
    let (n, expected) = if yes {
        (bound.answer(store.purge(&filter)).await?, dead.ids.clone())
    } else {
        let matching = bound
            .answer(store.list_summaries(&JobFilter {
                states: vec![JobState::Discarded],
                ..filter.clone()
            }))
            .await?;
        if matching.is_empty() {
            let mut not_purged = unpurged(store, bound, &filter, &dead.ids).await?;
            not_purged.extend(missing);
            say(
                json_out,
                json!({"purged": 0, "not_purged": not_purged}),
                "no matching dead letters",
            )?;
            return Ok(exit_code(&not_purged));
        }
        // Written with `?`: a prompt the operator cannot see must not be answered.
        write!(
            std::io::stderr(),
            "Delete {} dead letter(s) for good (ids {}..{})? [y/N] ",
            matching.len(),
            matching[0].id,
            matching[matching.len() - 1].id
        )?;
        std::io::stderr().flush()?;
        let mut answer = String::new();
        std::io::stdin().lock().read_line(&mut answer)?;
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            say!("job: nothing purged");
            return Ok(ExitCode::FAILURE);
        }
        // Exactly the confirmed ids: the filter may match other rows by now.
        let mut confirmed: Vec<i64> = matching.iter().map(|j| j.id).collect();
        let n = bound
            .answer(store.purge(&JobFilter {
                ids: confirmed.clone(),
                limit: Some(u32::try_from(confirmed.len())?),
                ..JobFilter::default()
            }))
            .await?;
        let named: Vec<i64> = dead
            .ids
            .iter()
            .copied()
            .filter(|id| !confirmed.contains(id))
            .collect();
        confirmed.extend(named);
        (n, confirmed)
    };
    let mut not_purged = unpurged(store, bound, &filter, &expected).await?;
    not_purged.extend(missing);
    say(
        json_out,
        json!({"purged": n, "not_purged": not_purged}),
        &format!("purged {n} dead letter(s)"),
    )?;
    Ok(exit_code(&not_purged))
}

/// Of the `named` ids, those of no job, each said on stderr.
async fn missing(store: &PgStore, bound: Bound, named: &[i64]) -> Result<Vec<i64>, Error> {
    if named.is_empty() {
        return Ok(Vec::new());
    }
    let found = bound
        .answer(store.list_summaries(&JobFilter {
            ids: named.to_vec(),
            limit: Some(u32::try_from(named.len())?),
            ..JobFilter::default()
        }))
        .await?;
    let missing: Vec<i64> = named
        .iter()
        .copied()
        .filter(|id| !found.iter().any(|j| j.id == *id))
        .collect();
    for id in &missing {
        say!("job: {id} was not purged: no such job");
    }
    Ok(missing)
}

/// Of `ids`, each meant to be deleted, those still there, each said on stderr with why.
async fn unpurged(
    store: &PgStore,
    bound: Bound,
    filter: &JobFilter,
    ids: &[i64],
) -> Result<Vec<i64>, Error> {
    let absent = left_behind(store, bound, filter, ids, "purged").await?;
    Ok(ids
        .iter()
        .copied()
        .filter(|id| !absent.contains(id))
        .collect())
}

/// Says on stderr why each of `ids`, meant to be `done` ("redriven", "purged") through
/// `filter`, still is there: it is not a dead letter, or it is one the filter's kind, queue,
/// tenant or tag leaves out (named together with a filter it fails), or another operation held
/// it. Returns the ids of no job, not said.
async fn left_behind(
    store: &PgStore,
    bound: Bound,
    filter: &JobFilter,
    ids: &[i64],
    done: &str,
) -> Result<Vec<i64>, Error> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let limit = Some(u32::try_from(ids.len())?);
    let left = bound
        .answer(store.list_summaries(&JobFilter {
            ids: ids.to_vec(),
            limit,
            ..JobFilter::default()
        }))
        .await?;
    let dead: Vec<i64> = left
        .iter()
        .filter(|j| j.state == JobState::Discarded)
        .map(|j| j.id)
        .collect();
    let matching: Vec<i64> = if dead.is_empty() {
        Vec::new()
    } else {
        bound
            .answer(store.list_summaries(&JobFilter {
                ids: dead,
                states: vec![JobState::Discarded],
                limit,
                ..filter.clone()
            }))
            .await?
            .iter()
            .map(|j| j.id)
            .collect()
    };
    for j in &left {
        if j.state != JobState::Discarded {
            say!(
                "job: {} was not {done}: it is {}, not a dead letter",
                j.id,
                j.state
            );
        } else if matching.contains(&j.id) {
            say!(
                "job: {} was not {done}: another operation held it; run the command again",
                j.id
            );
        } else {
            say!(
                "job: {} was not {done}: it is a dead letter the --kind/--queue/--tenant/--tag \
                 given leave out",
                j.id
            );
        }
    }
    Ok(ids
        .iter()
        .copied()
        .filter(|id| !left.iter().any(|j| j.id == *id))
        .collect())
}

fn exit_code(not_purged: &[i64]) -> ExitCode {
    if not_purged.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

async fn enqueue(store: &PgStore, bound: Bound, args: EnqueueArgs) -> Result<i64, Error> {
    // Read as serde_json reads it (a handler will: syntax, escapes, numbers within an f64's
    // range), but stored as the text given: written back from the `Value`, a number past an
    // f64's precision would change, where `jsonb` keeps it exact.
    serde_json::from_str::<serde_json::Value>(&args.payload)
        .map_err(|e| format!("the payload is not JSON: {e}"))?;
    let mut job = NewJob::new(args.kind, args.payload);
    if let Some(q) = args.queue {
        job.queue = q;
    }
    if let Some(p) = args.priority {
        job.priority = p;
    }
    if let Some(n) = args.max_attempts {
        job.max_attempts = n;
    }
    if let Some(v) = args.payload_version {
        job.payload_version = v;
    }
    job.run_at = match (args.delay, args.run_at) {
        (Some(d), _) => RunAt::In(d),
        (None, Some(at)) => RunAt::At(at),
        (None, None) => RunAt::Now,
    };
    if let Some(d) = args.deadline_in {
        job.deadline = Some(job::Deadline::In(d));
    }
    if let Some(key) = args.unique_key {
        job.unique = Some(job::Unique {
            key,
            scope: job::UniqueScope::default(),
            on_duplicate: job::OnDuplicate::default(),
        });
    }
    job.tags = args.tags;
    job.tenant = args.tenant;
    job.validate(store.payload_limit()).map_err(named_option)?;
    // The database checks what only it can (a deadline not after the run time it computes).
    bound
        .answer(async {
            job_postgres::enqueue(store.pool(), &job)
                .await
                .map_err(named_option)
        })
        .await
}

/// An enqueue option the framework refused, named as the command line gave it (`--in`, not the
/// builder's `schedule_in`).
fn named_option(e: job::EnqueueError) -> Error {
    let job::EnqueueError::InvalidOption { option, reason } = &e else {
        return e.into();
    };
    let given = match *option {
        "kind" => "the kind",
        "payload" => "the payload",
        "queue" => "--queue",
        "priority" => "--priority",
        "max_attempts" => "--max-attempts",
        "schedule_in" => "--in",
        "run_at" => "--run-at",
        "deadline_in" => "--deadline-in",
        // The deadline `--deadline-in` gives, refused for coming before the run time.
        "deadline" => "--deadline-in",
        "unique_key" => "--unique-key",
        "tenant" => "--tenant",
        "payload_version" => "--payload-version",
        // "tag 2 must not be empty", or "at most 32 tags, got 40".
        "tags" => {
            return match reason.strip_prefix("tag ") {
                Some(rest) => format!("--tag number {rest}"),
                None => format!("--tag: {reason}"),
            }
            .into();
        }
        _ => return e.into(),
    };
    format!("{given} {reason}").into()
}

fn print_check(check: &Check, json_out: bool) -> Result<(), StdoutError> {
    let problems = check.problems();
    if json_out {
        let counts: serde_json::Map<String, serde_json::Value> = check
            .counts
            .iter()
            .map(|(s, n)| (s.as_str().to_owned(), json!(n)))
            .collect();
        let classes: serde_json::Map<String, serde_json::Value> = check
            .dead_letters_by_class
            .iter()
            .map(|(c, n)| (c.clone(), json!(n)))
            .collect();
        print_json(&json!({
            "ok": problems.is_empty(),
            "counts": counts,
            "leases": {
                "held": check.leases_held,
                "expired": check.leases_expired,
                "overdue": check.leases_overdue,
                "not_running": check.leases_not_running,
                "oldest_expiry": check.oldest_expiry,
            },
            "stuck": check.stuck,
            "orphan_steps": check.orphan_steps,
            "step_totals_off": check.step_totals_off,
            "pending_stranded": check.pending_stranded,
            "dead_letters_by_class": classes,
            "schema_lag": check.schema_lag.as_ref().map(|lag| json!({
                "first_missing": lag.first_missing,
                "first_missing_name": lag.first_missing_name,
                "missing": lag.missing,
                "recorded": lag.recorded,
            })),
            "problems": problems,
        }))?;
        return Ok(());
    }
    let mut t = table(["state", "jobs"]);
    for (s, n) in &check.counts {
        add_row(&mut t, [s.to_string(), n.to_string()]);
    }
    numeric(&mut t, &[1]);
    print(&t)?;
    let mut t = table(["check", "count"]);
    add_row(
        &mut t,
        ["leases held".to_owned(), check.leases_held.to_string()],
    );
    add_row(
        &mut t,
        [
            "running without a live lease (expired, the rescuer's to take)".to_owned(),
            check.leases_expired.to_string(),
        ],
    );
    add_row(
        &mut t,
        [
            "leases expired for more than a lease".to_owned(),
            check.leases_overdue.to_string(),
        ],
    );
    add_row(
        &mut t,
        [
            "leases on rows that are not running".to_owned(),
            check.leases_not_running.to_string(),
        ],
    );
    add_row(
        &mut t,
        ["stuck executions".to_owned(), check.stuck.to_string()],
    );
    add_row(
        &mut t,
        [
            "steps without a job".to_owned(),
            check.orphan_steps.to_string(),
        ],
    );
    add_row(
        &mut t,
        [
            "jobs whose step totals disagree with their steps".to_owned(),
            check.step_totals_off.to_string(),
        ],
    );
    add_row(
        &mut t,
        [
            "pending jobs that wait for nothing".to_owned(),
            check.pending_stranded.to_string(),
        ],
    );
    numeric(&mut t, &[1]);
    print(&t)?;
    if !check.dead_letters_by_class.is_empty() {
        let mut t = table(["dead letters by last error class", "jobs"]);
        for (c, n) in &check.dead_letters_by_class {
            add_row(&mut t, [c.clone(), n.to_string()]);
        }
        numeric(&mut t, &[1]);
        print(&t)?;
    }
    if problems.is_empty() {
        print("ok: the queue reconciles")?;
    } else {
        for p in problems {
            print(format_args!("PROBLEM: {p}"))?;
        }
    }
    Ok(())
}

/// The dashboard's configuration from `job web`'s flags: on a loopback address and without
/// `--allowed-host`, the loopback names only, and the address it listens on (any of
/// 127.0.0.0/8), so that it answers where it listens (see
/// [`job_web::DashboardConfig::allowed_hosts`]).
fn web_config(
    listen: std::net::SocketAddr,
    mut allowed_hosts: Vec<String>,
    secure_cookie: bool,
) -> job_web::DashboardConfig {
    // An IPv4 address written as IPv6 (`[::ffff:127.0.0.1]`) is the IPv4 one: without the
    // canonical form it was not loopback, and the dashboard answered any Host name there.
    if allowed_hosts.is_empty() && listen.ip().to_canonical().is_loopback() {
        allowed_hosts = ["localhost", "127.0.0.1", "[::1]"]
            .map(str::to_owned)
            .to_vec();
        let own = match listen.ip() {
            std::net::IpAddr::V4(ip) => ip.to_string(),
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
        };
        if !allowed_hosts.contains(&own) {
            allowed_hosts.push(own);
        }
    }
    job_web::DashboardConfig {
        allowed_hosts,
        secure_cookie,
        ..job_web::DashboardConfig::default()
    }
}

/// What is wrong with an operator token: too short (the dashboard's rule), or holding a
/// character no login form can send (a NUL, a newline inside it, another control character).
fn token_problem(token: &str) -> Option<String> {
    if let Some(c) = token.chars().find(|c| c.is_control()) {
        return Some(format!(
            "the operator token holds a control character (U+{:04X}), which no login form \
             sends: use a random token of letters and digits, such as `openssl rand -hex 16` \
             prints",
            c as u32
        ));
    }
    job_web::operator_token_problem(token)
}

async fn web(
    store: PgStore,
    listen: std::net::SocketAddr,
    tenant: Option<String>,
    token_file: Option<std::path::PathBuf>,
    config: job_web::DashboardConfig,
) -> Result<(), Error> {
    let token = match token_file {
        Some(path) => {
            let token = std::fs::read_to_string(&path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?
                .trim()
                .to_owned();
            // A file given and empty is a mistake, not a wish to serve read-only (leave the
            // flag out for that): it served read-only, saying so only in its first line.
            if token.is_empty() {
                return Err(format!(
                    "{} holds no operator token (it is empty or only whitespace): write one                      into it, such as `openssl rand -hex 16` prints, or leave                      --operator-token-file out to serve read-only",
                    path.display()
                )
                .into());
            }
            Some(token)
        }
        None => std::env::var("JOB_OPERATOR_TOKEN")
            .ok()
            .map(|token| token.trim().to_owned()),
    };
    if let Some(problem) = token.as_deref().and_then(token_problem) {
        return Err(problem.into());
    }
    let mut dashboard = match tenant {
        Some(t) => job_web::Dashboard::for_tenant(store.for_tenant(t)),
        None => job_web::Dashboard::new(store),
    }
    .config(config);
    let read_only = token.as_deref().is_none_or(str::is_empty);
    if let Some(token) = token {
        dashboard = dashboard.operator_token(token);
    }
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    say!(
        "job web: serving on http://{addr}/{}",
        if read_only {
            " (read-only: no operator token)"
        } else {
            ""
        }
    );
    crate::serve::serve(listener, dashboard.router()).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::{check_options, web_config};
    use crate::cli::Cli;

    /// What `check_options` says of the command line `args` (after `job`).
    fn checked(args: &[&str]) -> Result<(), String> {
        let cli = Cli::try_parse_from(std::iter::once("job").chain(args.iter().copied()))
            .expect("clap accepts the command line");
        check_options(&cli.command).map_err(|e| e.to_string())
    }

    #[test]
    fn redrive_and_purge_refuse_more_ids_than_their_limit() {
        let ids: Vec<String> = (1..=1001).map(|id| id.to_string()).collect();
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        for verb in [&["redrive"][..], &["purge", "--yes"]] {
            let args: Vec<&str> = verb.iter().chain(&ids).copied().collect();
            assert_eq!(
                checked(&args),
                Err(
                    "1001 ids named, more than --limit 1000: give --limit 1001, or name them \
                     over several commands"
                        .into()
                ),
                "{verb:?}"
            );
            let raised: Vec<&str> = args.iter().copied().chain(["--limit", "1001"]).collect();
            assert_eq!(checked(&raised), Ok(()), "{verb:?} --limit 1001");
            assert_eq!(
                checked(&[verb, &["1", "2", "3", "--limit", "2"][..]].concat()),
                Err(
                    "3 ids named, more than --limit 2: give --limit 3, or name them over \
                     several commands"
                        .into()
                )
            );
            // An id named twice is one dead letter.
            assert_eq!(
                checked(&[verb, &["7", "7", "--limit", "1"][..]].concat()),
                Ok(())
            );
        }
        let many: Vec<String> = (1..=10_001).map(|id| id.to_string()).collect();
        let args: Vec<&str> = std::iter::once("redrive")
            .chain(many.iter().map(String::as_str))
            .chain(["--limit", "10000"])
            .collect();
        assert_eq!(
            checked(&args),
            Err("10001 ids named, more than --limit 10000: name at most 10000 per command".into())
        );
    }

    #[test]
    fn list_refuses_more_ids_than_its_limit_and_times_no_job_carries() {
        // `--limit 1 --id 1 --id 4` listed job 1 and said nothing of job 4.
        assert_eq!(
            checked(&["list", "--limit", "1", "--id", "1", "--id", "4"]),
            Err(
                "2 ids named, more than --limit 1: give --limit 2, or name them over several \
                 commands"
                    .into()
            )
        );
        assert_eq!(checked(&["list", "--id", "1", "--id", "4"]), Ok(()));
        // Refused before connecting, naming the option (it was the store's refusal, naming
        // `finalized_from`, after the connect).
        for (option, at) in [
            ("--finalized-from", "0000-12-31T00:00:00Z"),
            ("--finalized-to", "+10000-01-01T00:00:00Z"),
        ] {
            let said = checked(&["list", option, at]).expect_err(at);
            assert!(
                said.starts_with(&format!(
                    "{option} must be from 0001-01-01 to 9999-12-31 (UTC), got "
                )),
                "{said}"
            );
        }
        assert_eq!(
            checked(&["list", "--finalized-from", "0001-01-01T00:00:00Z"]),
            Ok(())
        );
    }

    #[test]
    fn a_token_no_login_form_sends_is_refused() {
        let said = super::token_problem("abcdefghijklmnop\0qrstuvwx").unwrap();
        assert!(said.contains("control character (U+0000)"), "{said}");
        assert!(super::token_problem("abcdefghijklmnopqrstuvwx").is_none());
        // The dashboard's own rule still applies.
        assert!(super::token_problem("short").is_some());
    }

    #[test]
    fn an_empty_allowed_host_is_refused() {
        // It would match no `Host`: the dashboard would answer every request 421.
        assert_eq!(
            checked(&[
                "web",
                "--allowed-host",
                "jobs.example",
                "--allowed-host",
                ""
            ]),
            Err(
                "--allowed-host must not be empty: leave it out to answer to the default names"
                    .into()
            )
        );
        assert_eq!(checked(&["web", "--allowed-host", "jobs.example"]), Ok(()));
    }

    #[test]
    fn on_a_loopback_address_the_dashboard_answers_to_the_loopback_names_only() {
        let loopback = "127.0.0.1:8080".parse().unwrap();
        assert_eq!(
            web_config(loopback, Vec::new(), false).allowed_hosts,
            ["localhost", "127.0.0.1", "[::1]"]
        );
        let named = web_config(loopback, vec!["jobs.example".into()], true);
        assert_eq!(named.allowed_hosts, ["jobs.example"]);
        assert!(named.secure_cookie);
        let v6 = "[::1]:8080".parse().unwrap();
        assert_eq!(web_config(v6, Vec::new(), false).allowed_hosts.len(), 3);
        let any = "0.0.0.0:8080".parse().unwrap();
        assert!(web_config(any, Vec::new(), false).allowed_hosts.is_empty());
        // An IPv4 loopback address written as IPv6 is loopback: it answered any Host.
        let mapped = "[::ffff:127.0.0.1]:8080".parse().unwrap();
        assert_eq!(
            web_config(mapped, Vec::new(), false).allowed_hosts,
            ["localhost", "127.0.0.1", "[::1]", "[::ffff:127.0.0.1]"]
        );
        // Any loopback address answers to its own address too.
        let other = "127.0.0.2:8080".parse().unwrap();
        assert_eq!(
            web_config(other, Vec::new(), false).allowed_hosts,
            ["localhost", "127.0.0.1", "[::1]", "127.0.0.2"]
        );
    }
}
