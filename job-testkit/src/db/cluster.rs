//! The private throwaway cluster [`TestDb`](super::TestDb) falls back to when no server
//! answers: started once per machine from the machine's own PostgreSQL binaries, shared by
//! every test process, and left running.
//!
//! Layout of its directory (`job-testkit-pg<major>-<user>` under the temporary directory, or
//! `JOB_TESTKIT_CLUSTER_DIR`): `data/` (the cluster, its unix socket too), `port` (where it
//! listens, on 127.0.0.1 only), `bindir` (the binaries it runs on), `log`, and `lock` while a
//! process sets it up. Processes race: the first to create `lock` (`create_new`) initializes
//! and starts the cluster, the others wait for the lock and then find it answering.
//!
//! Stop it with `$(cat <dir>/bindir)/pg_ctl -D <dir>/data stop` (as `postgres` when it was
//! started by root); otherwise it runs until the machine restarts.
//!
//! Also [`PrivateCluster`]: a cluster of one test's own, made the same way, which the test
//! may stop and restart.

use std::fs;
use std::io::{ErrorKind, Write};
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant, SystemTime};

/// Overrides where the binaries are (`initdb`, `pg_ctl`, `pg_isready`).
pub(super) const BINDIR_VAR: &str = "JOB_TESTKIT_PG_BINDIR";

/// Overrides the cluster's directory.
pub(super) const DIR_VAR: &str = "JOB_TESTKIT_CLUSTER_DIR";

/// The superuser `initdb` creates, whoever runs it.
pub(super) const SUPERUSER: &str = "postgres";

/// How long a process waits for another one setting the cluster up.
const LOCK_WAIT: Duration = Duration::from_secs(180);

/// A lock older than this, whose holder cannot be checked, is taken to be abandoned.
const LOCK_STALE: Duration = Duration::from_secs(300);

/// Makes sure the private cluster runs and returns its port. Blocking: call it off the
/// async runtime. The error says what was tried.
pub(super) fn ensure() -> Result<u16, String> {
    let bindir = find_bindir()?;
    let major = major_version(&bindir)?;
    let owner = Owner::detect()?;
    let dir = match std::env::var_os(DIR_VAR) {
        Some(dir) => PathBuf::from(dir),
        None => std::env::temp_dir().join(format!("job-testkit-pg{major}-{}", owner.name())),
    };
    fs::create_dir_all(&dir).map_err(|e| format!("could not create {}: {e}", dir.display()))?;
    if let Some(port) = answering(&bindir, &dir) {
        return Ok(port);
    }
    let _lock = Lock::acquire(&dir.join("lock"))?;
    // Whoever held the lock before us may have started it.
    if let Some(port) = answering(&bindir, &dir) {
        return Ok(port);
    }
    owner.adopt(&dir)?;
    if !dir.join("data").join("PG_VERSION").exists() {
        init(&bindir, &owner, &dir)?;
    }
    start(&bindir, &owner, &dir)
}

/// The port recorded in `dir`, when a server ready for connections listens there.
fn answering(bindir: &Path, dir: &Path) -> Option<u16> {
    let port: u16 = fs::read_to_string(dir.join("port"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let ready = Command::new(bindir.join("pg_isready"))
        .args(["-q", "-h", "127.0.0.1", "-t", "5", "-p", &port.to_string()])
        .status()
        .is_ok_and(|s| s.success());
    ready.then_some(port)
}

/// `initdb` into a scratch directory, renamed into place once complete, so a process killed
/// half-way leaves nothing that looks like a cluster.
fn init(bindir: &Path, owner: &Owner, dir: &Path) -> Result<(), String> {
    let scratch = dir.join(format!("data.init-{}", std::process::id()));
    let _ = fs::remove_dir_all(&scratch);
    let initdb = bindir.join("initdb");
    let args = [
        "-D".as_ref(),
        scratch.as_os_str(),
        "-U".as_ref(),
        SUPERUSER.as_ref(),
        "--auth=trust".as_ref(),
        "--encoding=UTF8".as_ref(),
        "--no-locale".as_ref(),
        "--no-sync".as_ref(),
    ];
    owner.run(&initdb, &args)?;
    fs::rename(&scratch, dir.join("data"))
        .map_err(|e| format!("could not move the new cluster into place: {e}"))
}

/// Starts the cluster on a free port of 127.0.0.1 and records the port. Retries on another
/// port when the one picked was taken meanwhile.
fn start(bindir: &Path, owner: &Owner, dir: &Path) -> Result<u16, String> {
    let data = dir.join("data");
    let log = dir.join("log");
    let pg_ctl = bindir.join("pg_ctl");
    let mut failures = Vec::new();
    for _ in 0..3 {
        let port = free_port()?;
        match pg_ctl_start(&pg_ctl, owner, &data, &log, port) {
            Ok(()) => {
                write_atomically(&dir.join("port"), &port.to_string())?;
                write_atomically(&dir.join("bindir"), &bindir.display().to_string())?;
                return Ok(port);
            }
            Err(e) => failures.push(e),
        }
    }
    let tail = fs::read_to_string(&log).unwrap_or_default();
    let tail: Vec<&str> = tail.lines().rev().take(10).collect();
    Err(format!(
        "pg_ctl could not start the cluster in {}: {}; its log ends:\n{}",
        data.display(),
        failures.join("; "),
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    ))
}

/// `pg_ctl start` of the cluster in `data` on `port` of 127.0.0.1, waiting (60 s at most)
/// until it accepts connections. A throwaway cluster: durability off, room for many test
/// databases' pools, its unix socket in its data directory.
fn pg_ctl_start(
    pg_ctl: &Path,
    owner: &Owner,
    data: &Path,
    log: &Path,
    port: u16,
) -> Result<(), String> {
    let options = format!(
        "-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories='{}' \
         -c max_connections=300 -c fsync=off -c synchronous_commit=off \
         -c full_page_writes=off",
        data.display()
    );
    let args = [
        "-D".as_ref(),
        data.as_os_str(),
        "-l".as_ref(),
        log.as_os_str(),
        "-w".as_ref(),
        "-t".as_ref(),
        "60".as_ref(),
        "-o".as_ref(),
        options.as_ref(),
        "start".as_ref(),
    ];
    owner.run(pg_ctl, &args)
}

/// How [`PrivateCluster::stop`] stops the server: `pg_ctl stop -m <mode>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopMode {
    /// Waits for nothing: sessions are ended at once and a checkpoint is written (`fast`).
    Fast,
    /// Kills every process at once; the next start recovers from the WAL (`immediate`).
    Immediate,
}

impl StopMode {
    fn arg(self) -> &'static str {
        match self {
            StopMode::Fast => "fast",
            StopMode::Immediate => "immediate",
        }
    }
}

/// A PostgreSQL cluster of one test's own, which the test may stop, start and restart (a
/// server restart under running workers), unlike the shared fallback cluster [`TestDb`]
/// uses, which other tests rely on. Made like that one (the machine's own binaries, found the
/// same way; trust authentication; the superuser `postgres`; durability off; as the `postgres`
/// user when the test runs as root), in a fresh directory under the temporary directory, on a
/// free port of 127.0.0.1 that it keeps across restarts. Dropping it stops the server
/// (`immediate`) and removes the directory.
///
/// Every method blocks (it runs `initdb` or `pg_ctl`): call them off the async runtime
/// (`tokio::task::spawn_blocking`), or from a test whose runtime has other threads.
///
/// [`TestDb`]: crate::TestDb
#[derive(Debug)]
pub struct PrivateCluster {
    bindir: PathBuf,
    owner: Owner,
    dir: tempfile::TempDir,
    port: u16,
}

impl PrivateCluster {
    /// Creates the cluster and starts it. The error says what was tried (no binaries, no
    /// `postgres` user to run them as root, `initdb` or `pg_ctl` failing).
    pub fn start() -> Result<PrivateCluster, String> {
        let bindir = find_bindir()?;
        let owner = Owner::detect()?;
        let dir = tempfile::Builder::new()
            .prefix("job-testkit-private-pg-")
            .tempdir()
            .map_err(|e| format!("could not create a directory for the cluster: {e}"))?;
        owner.adopt(dir.path())?;
        init(&bindir, &owner, dir.path())?;
        let mut cluster = PrivateCluster {
            bindir,
            owner,
            dir,
            port: 0,
        };
        let mut failures = Vec::new();
        for _ in 0..3 {
            cluster.port = free_port()?;
            match cluster.start_again() {
                Ok(()) => return Ok(cluster),
                Err(e) => failures.push(e),
            }
        }
        Err(format!(
            "pg_ctl could not start a private cluster in {}: {}; its log ends:\n{}",
            cluster.dir.path().display(),
            failures.join("; "),
            cluster.log_tail(10)
        ))
    }

    /// Its port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The options to connect to database `database` as the superuser.
    pub fn connect_options(&self, database: &str) -> sqlx::postgres::PgConnectOptions {
        sqlx::postgres::PgConnectOptions::new()
            .host("127.0.0.1")
            .port(self.port)
            .username(SUPERUSER)
            .database(database)
    }

    /// The URL of database `database`, as the superuser.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://{SUPERUSER}@127.0.0.1:{}/{database}", self.port)
    }

    /// Stops the server (`pg_ctl stop -m <mode>`), waiting until it has stopped.
    pub fn stop(&self, mode: StopMode) -> Result<(), String> {
        let data = self.dir.path().join("data");
        let args = [
            "-D".as_ref(),
            data.as_os_str(),
            "-m".as_ref(),
            mode.arg().as_ref(),
            "-w".as_ref(),
            "-t".as_ref(),
            "60".as_ref(),
            "stop".as_ref(),
        ];
        self.owner.run(&self.bindir.join("pg_ctl"), &args)
    }

    /// Starts the stopped server again on its port, waiting until it accepts connections.
    pub fn start_again(&self) -> Result<(), String> {
        let data = self.dir.path().join("data");
        let log = self.dir.path().join("log");
        pg_ctl_start(
            &self.bindir.join("pg_ctl"),
            &self.owner,
            &data,
            &log,
            self.port,
        )
    }

    /// The last `lines` lines of the server's log.
    pub fn log_tail(&self, lines: usize) -> String {
        let log = fs::read_to_string(self.dir.path().join("log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(lines).collect();
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        if self.port != 0 {
            let _ = self.stop(StopMode::Immediate);
        }
        // The directory (the TempDir) is removed after this.
    }
}

fn free_port() -> Result<u16, String> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("could not find a free port on 127.0.0.1: {e}"))
}

fn write_atomically(path: &Path, contents: &str) -> Result<(), String> {
    let scratch = path.with_extension(format!("tmp-{}", std::process::id()));
    fs::write(&scratch, contents)
        .and_then(|()| fs::rename(&scratch, path))
        .map_err(|e| format!("could not write {}: {e}", path.display()))
}

/// The first directory holding `initdb`, `pg_ctl` and `pg_isready`: `JOB_TESTKIT_PG_BINDIR`
/// alone when set, else `pg_config --bindir`, the newest `/usr/lib/postgresql/*/bin`,
/// `/usr/local/pgsql/bin`, then `PATH`.
fn find_bindir() -> Result<PathBuf, String> {
    let candidates = match std::env::var_os(BINDIR_VAR) {
        Some(dir) => vec![PathBuf::from(dir)],
        None => {
            let mut candidates = Vec::new();
            if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
                if out.status.success() {
                    let dir = String::from_utf8_lossy(&out.stdout).trim().to_owned();
                    candidates.push(PathBuf::from(dir));
                }
            }
            let mut versions: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|e| {
                    let version = e.file_name().to_str()?.parse().ok()?;
                    Some((version, e.path().join("bin")))
                })
                .collect();
            versions.sort_by_key(|(version, _)| std::cmp::Reverse(*version));
            candidates.extend(versions.into_iter().map(|(_, dir)| dir));
            candidates.push(PathBuf::from("/usr/local/pgsql/bin"));
            if let Some(path) = std::env::var_os("PATH") {
                candidates.extend(std::env::split_paths(&path));
            }
            candidates
        }
    };
    let has_all = |dir: &Path| {
        ["initdb", "pg_ctl", "pg_isready"]
            .iter()
            .all(|b| dir.join(b).is_file())
    };
    match candidates.iter().find(|dir| has_all(dir)) {
        Some(dir) => Ok(dir.clone()),
        None => {
            let tried: Vec<String> = candidates.iter().map(|d| d.display().to_string()).collect();
            Err(format!(
                "no PostgreSQL server binaries (initdb, pg_ctl, pg_isready) in any of: {}",
                tried.join(", ")
            ))
        }
    }
}

/// The major version the binaries report (`pg_ctl (PostgreSQL) 15.14` is 15).
fn major_version(bindir: &Path) -> Result<String, String> {
    let pg_ctl = bindir.join("pg_ctl");
    let out = Command::new(&pg_ctl)
        .arg("--version")
        .output()
        .map_err(|e| format!("could not run {}: {e}", pg_ctl.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.split(')')
        .nth(1)
        .and_then(|rest| rest.trim().split(|c: char| !c.is_ascii_digit()).next())
        .filter(|major| !major.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| format!("{} --version said {text:?}", pg_ctl.display()))
}

/// Who runs the cluster: this user, or `postgres` when this process is root (PostgreSQL
/// refuses to run as root).
#[derive(Debug)]
enum Owner {
    Me(String),
    Postgres,
}

impl Owner {
    fn detect() -> Result<Owner, String> {
        let id = |args: &[&str]| {
            Command::new("id")
                .args(args)
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        };
        if id(&["-u"]).as_deref() != Some("0") {
            let me = id(&["-un"])
                .or_else(|| std::env::var("USER").ok())
                .unwrap_or_else(|| "user".to_owned());
            return Ok(Owner::Me(me));
        }
        if id(&["-u", SUPERUSER]).is_none() {
            return Err(format!(
                "running as root, and there is no `{SUPERUSER}` user to run PostgreSQL as"
            ));
        }
        Ok(Owner::Postgres)
    }

    fn name(&self) -> &str {
        match self {
            Owner::Me(name) => name,
            Owner::Postgres => SUPERUSER,
        }
    }

    /// Gives `dir` to the cluster's user, so `initdb` and the server can write in it.
    fn adopt(&self, dir: &Path) -> Result<(), String> {
        match self {
            Owner::Me(_) => Ok(()),
            Owner::Postgres => {
                let owner = format!("{SUPERUSER}:");
                let out = Command::new("chown").arg(owner).arg(dir).output();
                check("chown", out)
            }
        }
    }

    /// Runs `program` as the cluster's user.
    fn run(&self, program: &Path, args: &[&std::ffi::OsStr]) -> Result<(), String> {
        let what = program.file_name().map_or_else(
            || program.display().to_string(),
            |n| n.to_string_lossy().into(),
        );
        let out = match self {
            Owner::Me(_) => Command::new(program).args(args).output(),
            Owner::Postgres if Path::new("/usr/sbin/runuser").exists() || on_path("runuser") => {
                Command::new("runuser")
                    .args(["-u", SUPERUSER, "--"])
                    .arg(program)
                    .args(args)
                    .output()
            }
            Owner::Postgres => {
                let mut line = shell_quote(program.as_os_str());
                for arg in args {
                    line.push(' ');
                    line.push_str(&shell_quote(arg));
                }
                Command::new("su")
                    .args([SUPERUSER, "-s", "/bin/sh", "-c", &line])
                    .output()
            }
        };
        check(&what, out)
    }
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(program).is_file()))
}

fn shell_quote(arg: &std::ffi::OsStr) -> String {
    format!("'{}'", arg.to_string_lossy().replace('\'', r"'\''"))
}

fn check(what: &str, out: std::io::Result<Output>) -> Result<(), String> {
    let out = out.map_err(|e| format!("could not run {what}: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let said = if stderr.trim().is_empty() {
        stdout
    } else {
        stderr
    };
    Err(format!("{what} failed ({}): {}", out.status, said.trim()))
}

/// A lock file held while this process sets the cluster up; removed on drop.
struct Lock(PathBuf);

impl Lock {
    fn acquire(path: &Path) -> Result<Lock, String> {
        let start = Instant::now();
        loop {
            match fs::File::create_new(path) {
                Ok(mut file) => {
                    let _ = write!(file, "{}", std::process::id());
                    return Ok(Lock(path.to_owned()));
                }
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                    if let Some(holder) = abandoned(path) {
                        steal(path, &holder);
                        continue;
                    }
                    if start.elapsed() > LOCK_WAIT {
                        return Err(format!(
                            "gave up after {LOCK_WAIT:?} waiting for {} (another process setting \
                             up the cluster; delete the file if none is)",
                            path.display()
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => return Err(format!("could not create {}: {e}", path.display())),
            }
        }
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

/// The lock's contents when its holder is gone: a pid no longer running, or (where that
/// cannot be checked) a lock older than [`LOCK_STALE`].
fn abandoned(path: &Path) -> Option<String> {
    let holder = fs::read_to_string(path).ok()?;
    let age = fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .unwrap_or_default();
    let gone = match holder.trim().parse::<u32>() {
        Ok(pid) if Path::new("/proc/self").exists() => !Path::new(&format!("/proc/{pid}")).exists(),
        // Created but not yet written: give the writer a moment.
        _ => age > LOCK_STALE || (holder.is_empty() && age > Duration::from_secs(10)),
    };
    gone.then_some(holder)
}

/// Takes an abandoned lock away. Renaming is atomic, so of several processes that found it
/// abandoned one takes it; should that be a fresh lock another process just created, it is
/// put back (a hard link never replaces an existing file).
fn steal(path: &Path, holder: &str) {
    let aside = path.with_extension(format!("stale-{}", std::process::id()));
    if fs::rename(path, &aside).is_err() {
        return;
    }
    if fs::read_to_string(&aside).ok().as_deref() != Some(holder) {
        let _ = fs::hard_link(&aside, path);
    }
    let _ = fs::remove_file(&aside);
}
