//! Durations written as text in the attribute (`timeout = "2m"`), parsed at compile time.

use std::time::Duration;

/// The longest duration accepted: `job_core::MAX_DURATION` (100 years), the bound the worker
/// puts on every duration setting and an enqueue on `schedule_in`.
const MAX: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Parses a humantime duration (`"2m"`, `"1h 30m"`, `"500ms"`, `"2 minutes"`), refusing zero,
/// negative and absurdly long ones. The error is the reason, without the key's name.
pub(crate) fn parse(text: &str) -> Result<Duration, String> {
    if text.trim_start().starts_with('-') {
        return Err("must be positive".to_owned());
    }
    let duration =
        humantime::parse_duration(text).map_err(|e| format!("is not a duration ({e})"))?;
    if duration.is_zero() {
        return Err("must be greater than zero".to_owned());
    }
    if duration > MAX {
        return Err("must be under 100 years".to_owned());
    }
    Ok(duration)
}

/// Shows a duration the way a user would write it (`2m`, `1h 30m`).
pub(crate) fn show(duration: Duration) -> String {
    humantime::format_duration(duration).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_humantime_text() {
        assert_eq!(parse("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse("1h 30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("2minutes"), Ok(Duration::from_secs(120)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
    }

    #[test]
    fn refuses_zero_negative_and_endless_durations() {
        assert_eq!(parse("0s"), Err("must be greater than zero".to_owned()));
        assert_eq!(parse("-1s"), Err("must be positive".to_owned()));
        assert_eq!(parse(" -1s"), Err("must be positive".to_owned()));
        assert_eq!(parse("200years"), Err("must be under 100 years".to_owned()));
    }

    #[test]
    fn refuses_text_that_is_not_a_duration() {
        assert!(parse("").is_err());
        assert!(parse("30").unwrap_err().contains("unit"));
        assert!(parse("soon").is_err());
        assert!(parse("2 fortnights").is_err());
    }

    #[test]
    fn shows_durations_as_written() {
        assert_eq!(show(Duration::from_secs(120)), "2m");
        assert_eq!(show(Duration::from_secs(5400)), "1h 30m");
    }
}
