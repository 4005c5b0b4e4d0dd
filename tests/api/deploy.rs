//! The operator packaging names only metrics the service documents: every `mcp_connect_*`
//! series in the Prometheus alert rules and the Grafana dashboard is a row of the metrics
//! table in docs/operations.md (a renamed metric would leave an alert that never fires).
//! The rules' behaviour is tested by `promtool test rules` (scripts/test).

use std::collections::BTreeSet;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn read(path: &str) -> String {
    std::fs::read_to_string(format!("{ROOT}/{path}")).unwrap()
}

/// Every `mcp_connect_*` name in `text`, histogram series suffixes taken off.
fn metric_names(text: &str) -> BTreeSet<String> {
    let re = regex_lite::Regex::new(r"mcp_connect_[a-z0-9_]+").unwrap();
    re.find_iter(text)
        .map(|m| {
            let n = m.as_str();
            ["_bucket", "_count", "_sum"]
                .iter()
                .find_map(|s| n.strip_suffix(s).filter(|b| b.ends_with("_seconds")))
                .unwrap_or(n)
                .to_owned()
        })
        .collect()
}

/// The names in docs/operations.md's metrics table (its rows start with a metric in backquotes).
fn documented() -> BTreeSet<String> {
    let re = regex_lite::Regex::new(r"(?m)^\| `(mcp_connect_[a-z0-9_]+)` \|").unwrap();
    re.captures_iter(&read("docs/operations.md")).map(|c| c[1].to_owned()).collect()
}

#[test]
fn alerts_and_the_dashboard_use_only_documented_metrics() {
    let documented = documented();
    assert!(documented.len() >= 15, "docs/operations.md's metrics table was found: {documented:?}");
    for file in ["deploy/prometheus/alerts.yaml", "deploy/grafana/mcp-connect.json"] {
        let used = metric_names(&read(file));
        assert!(!used.is_empty(), "{file} uses mcp-connect's metrics");
        let unknown: Vec<_> = used.difference(&documented).collect();
        assert!(unknown.is_empty(), "{file} uses metrics docs/operations.md does not document: {unknown:?}");
    }
}

#[test]
fn the_dashboard_is_grafana_json_with_a_query_in_every_panel() {
    let d: serde_json::Value = serde_json::from_str(&read("deploy/grafana/mcp-connect.json")).unwrap();
    let panels = d["panels"].as_array().unwrap();
    assert!(!panels.is_empty());
    for p in panels {
        let expr = p["targets"][0]["expr"].as_str().unwrap_or_default();
        assert!(expr.contains("mcp_connect_"), "panel {} queries mcp-connect: {expr}", p["title"]);
    }
}
