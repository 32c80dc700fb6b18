//! The alert rules file: checked and unit-tested by promtool, and read here, with each rule's
//! expression naming only metrics the framework emits.

use std::path::PathBuf;
use std::process::Command;

use yaml_rust2::YamlLoader;

fn docs() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs")
}

fn promtool(args: &[&str]) -> Option<std::process::Output> {
    Command::new("promtool")
        .args(args)
        .current_dir(docs())
        .output()
        .ok()
}

/// Needs Prometheus's `promtool` (Debian's `prometheus` package; `.ci/run` installs it): a
/// machine without it fails here saying so, rather than passing unchecked.
#[test]
fn the_alert_rules_check_and_pass_their_unit_tests_with_promtool() {
    let check = promtool(&["check", "rules", "prometheus-alerts.yml"]).expect(
        "promtool runs: install it (`apt-get install prometheus`, or promtool from \
             https://prometheus.io/download/) to check docs/prometheus-alerts.yml",
    );
    assert!(check.status.success(), "{check:?}");
    let test = promtool(&["test", "rules", "prometheus-alerts.test.yml"]).unwrap();
    assert!(test.status.success(), "{test:?}");
}

#[test]
fn the_alert_rules_name_the_five_alerts_over_metrics_the_framework_emits() {
    let text = std::fs::read_to_string(docs().join("prometheus-alerts.yml")).unwrap();
    let docs = YamlLoader::load_from_str(&text).expect("valid YAML");
    let rules = docs[0]["groups"][0]["rules"]
        .as_vec()
        .expect("a rule group");
    let names: Vec<&str> = rules.iter().filter_map(|r| r["alert"].as_str()).collect();
    assert_eq!(
        names,
        [
            "JobDeadLetters",
            "JobOldestPendingTooOld",
            "JobFailureRateHigh",
            "JobWorkersDyingWithWork",
            "JobReporterAbsent"
        ]
    );
    let known: Vec<&str> = job::METRICS.iter().map(|m| m.name).collect();
    for rule in rules {
        let expr = rule["expr"].as_str().expect("an expression");
        let used: Vec<&str> = expr
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| w.starts_with("job_"))
            .collect();
        assert!(!used.is_empty(), "{expr}");
        for metric in used {
            assert!(
                known.contains(&metric),
                "{metric} is not a metric of job::METRICS"
            );
        }
        assert!(rule["labels"]["severity"].as_str().is_some());
        assert!(rule["annotations"]["summary"].as_str().is_some());
    }
    assert!(rules[0]["expr"].as_str().unwrap().contains("> 0"));
    assert!(rules[1]["expr"].as_str().unwrap().contains("> 5 * 60"));
    assert!(rules[2]["expr"].as_str().unwrap().contains("[10m]"));
    assert!(rules[2]["expr"].as_str().unwrap().contains("> 0.05"));
    assert!(rules[3]["expr"]
        .as_str()
        .unwrap()
        .contains("job_rescued_total[20m]"));
}
