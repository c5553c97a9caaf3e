//! Runs a driver of bench/peers/ (Python or Node.js) on some cases and reads its answer: one
//! JSON document on stdout. A driver that fails is the benchmark's failure, with the
//! driver's own message.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};

use super::cases::{Case, Measured, Target};
use crate::harness::BenchResult;

/// An interpreter and its driver script.
#[derive(Debug, Clone)]
pub struct Driver {
    pub interpreter: String,
    pub script: String,
}

impl Driver {
    async fn invoke(&self, spec: &Value) -> BenchResult<Value> {
        let out = tokio::process::Command::new(&self.interpreter)
            .arg(&self.script)
            .arg(spec.to_string())
            .kill_on_drop(true)
            .output()
            .await
            .map_err(|e| format!("{} {}: {e}", self.interpreter, self.script))?;
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = stderr.lines().rev().take(12).collect();
            return Err(format!(
                "{} {} failed ({}) on {spec}:\n{}",
                self.interpreter,
                self.script,
                out.status,
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            )
            .into());
        }
        Ok(serde_json::from_slice(&out.stdout)
            .map_err(|e| format!("{}: not JSON on stdout: {e}", self.script))?)
    }

    /// The versions of what the driver's peers are, as it reads them from its installation.
    pub async fn versions(&self) -> BenchResult<BTreeMap<String, String>> {
        let v = self.invoke(&json!({"peer": "versions"})).await?;
        Ok(v.as_object()
            .map(|o| {
                o.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                    .collect()
            })
            .unwrap_or_default())
    }

    /// Runs `cases` in one process of the driver, `peer` on `target`.
    pub async fn run(
        &self,
        peer: &str,
        target: Option<&Target>,
        cases: &[Case],
    ) -> BenchResult<Vec<Measured>> {
        let specs: Vec<Value> = cases.iter().map(Case::spec).collect();
        let answer = self.invoke(&spec(peer, target, specs)).await?;
        let results = answer["results"]
            .as_array()
            .ok_or("the driver answered no results")?;
        results.iter().map(measured).collect()
    }

    /// One case run for exactly `calls` calls (after one call to connect), for counting
    /// round trips: the forwarder counts the whole process, so the benchmark subtracts a
    /// run of 0 calls from a run of `calls`.
    pub async fn run_calls(
        &self,
        peer: &str,
        target: &Target,
        case: &str,
        calls: usize,
    ) -> BenchResult<()> {
        let specs = vec![json!({"case": case, "calls": calls})];
        self.invoke(&spec(peer, Some(target), specs)).await?;
        Ok(())
    }
}

fn spec(peer: &str, target: Option<&Target>, cases: Vec<Value>) -> Value {
    let mut s = json!({"peer": peer, "cases": cases});
    if let Some(t) = target {
        s["host"] = json!(t.host);
        s["port"] = json!(t.port);
        s["dbname"] = json!(t.dbname);
        s["user"] = json!(t.user);
    }
    s
}

fn measured(r: &Value) -> BenchResult<Measured> {
    let latencies: Vec<Duration> = r["latencies_ns"]
        .as_array()
        .ok_or("a result without latencies_ns")?
        .iter()
        .map(|v| Duration::from_nanos(v.as_f64().unwrap_or(0.0) as u64))
        .collect();
    let outcomes = r["outcomes"]
        .as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0)))
                .collect()
        })
        .unwrap_or_default();
    Ok(Measured::new(
        latencies,
        r["seconds"].as_f64().unwrap_or(0.0),
        r["executions"].as_u64().unwrap_or(0),
        r["keys"].as_u64().unwrap_or(0),
        outcomes,
    ))
}
