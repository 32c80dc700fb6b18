//! Output: one JSON object per line, and the small statistics the workloads share.

use std::io::Write;

use serde_json::Value;

/// Keys printed first, in this order; the others follow alphabetically.
const FIRST: [&str; 6] = [
    "workload",
    "run",
    "interval",
    "jobs",
    "concurrency",
    "seconds",
];

/// Prints `value` as one line on stdout, flushed, with the [`FIRST`] keys leading. A
/// workload's line gets the machine's `loadavg` when it has none.
pub(crate) fn emit(value: &Value) {
    let mut value = value.clone();
    if let Some(map) = value.as_object_mut() {
        if map.contains_key("workload") && !map.contains_key("loadavg") {
            map.insert("loadavg".into(), loadavg().into());
        }
    }
    let line = match value.as_object() {
        Some(map) => {
            let first = FIRST.iter().filter_map(|k| map.get(*k).map(|v| (*k, v)));
            let rest = map
                .iter()
                .filter(|(k, _)| !FIRST.contains(&k.as_str()))
                .map(|(k, v)| (k.as_str(), v));
            let fields: Vec<String> = first
                .chain(rest)
                .map(|(k, v)| format!("{}:{v}", Value::from(k)))
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        None => value.to_string(),
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// `x` rounded to `digits` decimals (for readable JSON).
pub(crate) fn round(x: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (x * f).round() / f
}

/// `n` per second over `seconds`, to one decimal.
pub(crate) fn per_s(n: usize, seconds: f64) -> f64 {
    if seconds <= 0.0 {
        return 0.0;
    }
    round(n as f64 / seconds, 1)
}

/// The nearest-rank percentile `p` (0 to 100) of `sorted` (ascending, not empty).
pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The median of `values` (not empty).
pub(crate) fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// A `/proc/<pid>/status` field in kB (`VmHWM`: peak resident set, `VmRSS`: current), as MiB.
/// `pid` None is this process.
pub(crate) fn proc_status_mib(pid: Option<u32>, field: &str) -> Option<f64> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/status"),
        None => "/proc/self/status".to_owned(),
    };
    let status = std::fs::read_to_string(path).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kb: f64 = line
        .trim_start_matches(field)
        .trim_start_matches(':')
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(round(kb / 1024.0, 1))
}

/// The 1-minute load average (the machine is shared: a busy neighbour shows here).
pub(crate) fn loadavg() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/loadavg").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

/// CPU seconds (user + system) process `pid` has used, from `/proc/<pid>/stat` (ticks of
/// 1/100 s, the Linux default). `None` is this process.
pub(crate) fn proc_cpu_s(pid: Option<u32>) -> Option<f64> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/stat"),
        None => "/proc/self/stat".to_owned(),
    };
    let stat = std::fs::read_to_string(path).ok()?;
    // Fields after the command name (which may hold spaces): state is field 3, utime 14.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

/// CPU seconds used so far by the server backends of the connections named `app` on this
/// database (they must be on this machine), and how many there are.
pub(crate) async fn backend_cpu_s(pool: &sqlx::PgPool, app: &str) -> crate::Result<(f64, usize)> {
    let pids: Vec<i32> = sqlx::query_scalar(
        // The worker's own pools are named after its application name (`<app>: job worker`).
        "SELECT pid FROM pg_stat_activity \
         WHERE (application_name = $1 OR application_name LIKE $1 || ': %') \
           AND datname = current_database()",
    )
    .bind(app)
    .fetch_all(pool)
    .await?;
    let total = pids
        .iter()
        .filter_map(|pid| proc_cpu_s(u32::try_from(*pid).ok()))
        .sum();
    Ok((total, pids.len()))
}
