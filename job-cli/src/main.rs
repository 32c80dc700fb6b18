//! `job`: migrate, inspect and operate the job framework's queue from a shell, and serve its
//! dashboard. Configured by `--database-url` or `DATABASE_URL`; tables for people, `--json`
//! for scripts. See `job --help`.

mod cli;
mod commands;
mod output;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // Rust ignores SIGPIPE, so printing to a closed pipe (`job list | head`) would panic; a
    // command-line tool should end quietly instead, as `ls` does.
    #[cfg(unix)]
    // SAFETY: setting a signal's disposition to its default before any thread is started.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = cli::Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("job: cannot start a runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(commands::run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("job: {}", output::printable(&e.to_string()));
            ExitCode::FAILURE
        }
    }
}
