//! `job`: migrate, inspect and operate the job framework's queue from a shell, and serve its
//! dashboard. Configured by `--database-url` or `DATABASE_URL`; tables for people, `--json`
//! for scripts. See `job --help`.

/// `eprintln!` that never panics: a message to a standard error that cannot be written (a
/// full disk, `2>/dev/full`) is dropped, and the command ends with the exit code it decided on,
/// where `eprintln!` would panic and exit 101.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

mod cli;
mod commands;
mod output;
mod serve;
mod wait;

use std::io::Write as _;
use std::process::ExitCode;

use clap::Parser as _;

/// The exit code of a command line that cannot be read: sysexits.h's `EX_USAGE`.
const USAGE: u8 = 64;

fn main() -> ExitCode {
    // Rust ignores SIGPIPE, so printing to a closed pipe (`job list | head`) would panic; a
    // command-line tool should end quietly instead, as `ls` does.
    #[cfg(unix)]
    // SAFETY: setting a signal's disposition to its default before any thread is started.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    if let Some(problem) = not_utf8() {
        say!("job: {problem}");
        return ExitCode::from(USAGE);
    }
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        // A command line that cannot be read exits with EX_USAGE, not clap's 2, which `check`
        // gives a meaning of its own (the queue does not reconcile): a monitor must not read
        // a typo as a queue problem.
        Err(e) if e.use_stderr() => {
            let _ = e.print();
            return ExitCode::from(USAGE);
        }
        // `--help` and `--version` succeed only when what they print was written: into a
        // full disk or a closed file they fail like any other output (clap's error, and the
        // one a buffered stdout would only meet at exit, were dropped, and the exit code said
        // it was printed).
        Err(e) => {
            return match e.print().and_then(|()| std::io::stdout().flush()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    say!("job: {}", output::StdoutError::from(error));
                    ExitCode::FAILURE
                }
            };
        }
    };
    init_tracing();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            say!("job: cannot start a runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(commands::run(cli)) {
        Ok(code) => code,
        Err(e) => {
            say!("job: {}", output::printable(&e.to_string()));
            ExitCode::FAILURE
        }
    }
}

/// The first argument (or `DATABASE_URL`) that is not UTF-8, said with its position and up to
/// 40 characters of it (clap says only "invalid UTF-8 was detected in one or more arguments",
/// and a long command line leaves the operator to guess which).
fn not_utf8() -> Option<String> {
    let shown = |value: &std::ffi::OsStr| {
        let lossy = value.to_string_lossy();
        let cut: String = lossy.chars().take(40).collect();
        let more = if cut.len() < lossy.len() { "…" } else { "" };
        format!("{}{more}", output::printable(&cut))
    };
    if let Some((n, arg)) = std::env::args_os()
        .enumerate()
        .skip(1)
        .find(|(_, arg)| arg.to_str().is_none())
    {
        return Some(format!(
            "argument {n} is not UTF-8: \"{}\" (bytes that are not UTF-8 shown as U+FFFD)",
            shown(&arg)
        ));
    }
    std::env::var_os("DATABASE_URL")
        .filter(|url| url.to_str().is_none())
        .map(|url| format!("DATABASE_URL is not UTF-8: \"{}\"", shown(&url)))
}

/// What is logged when `RUST_LOG` is not set: the job crates' information and every crate's
/// warnings, but not sqlx's of a slow statement, which print the statement's whole text (a
/// page of SQL before the one line saying what happened, when `--timeout` stopped it).
const DEFAULT_LOG: &str =
    "warn,sqlx::query=error,job=info,job_core=info,job_postgres=info,job_web=info";

/// Logs to stderr, so that what the framework reports through `tracing` is seen: the
/// dashboard's store errors and refused logins, the pool's warnings, applied migrations.
/// `RUST_LOG` chooses what (`RUST_LOG=debug`); an invalid one is said and ignored.
fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    let filter = match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.trim().is_empty() => EnvFilter::try_new(&spec).unwrap_or_else(|e| {
            say!("job: RUST_LOG ignored ({e}); logging {DEFAULT_LOG}");
            EnvFilter::new(DEFAULT_LOG)
        }),
        _ => EnvFilter::new(DEFAULT_LOG),
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}
