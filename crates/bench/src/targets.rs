//! The targets (issue 26 and the earlier ones that still hold), each with what this run
//! measured. Reported, never asserted: a timing on a shared two-core machine is evidence,
//! not a test. With several runs (`--repeat`), rates and costs are judged on the median
//! run (the range is shown), hit rate and errors on every run, and the half-rate p99 on
//! how many runs kept it.

use crate::report::{Results, Target, ms, thousands};

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v.get(n / 2).copied().unwrap_or(0.0),
        n => (v.get(n / 2 - 1).copied().unwrap_or(0.0) + v.get(n / 2).copied().unwrap_or(0.0)) / 2.0,
    }
}

/// "median X (lowest–highest)" of the runs.
fn spread(v: &[f64], fmt: fn(f64) -> String) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if v.len() < 2 {
        fmt(median(v.to_vec()))
    } else {
        format!("median {} ({}–{})", fmt(median(v.to_vec())), fmt(lo), fmt(hi))
    }
}

/// A rate against the floor: judged on each run's ratio to the floor measured beside it
/// where there is one (the machine drifts within the hour the runs take), with the ratio
/// to the floor measured before the runs shown too.
fn against_floor(name: &'static str, at_least: f64, before: &[f64], beside: Option<&[f64]>) -> Target {
    let x = |v: f64| format!("{v:.2} ×");
    let target = format!("≥ {at_least} × floor");
    match beside.filter(|b| !b.is_empty()) {
        Some(b) => Target {
            name,
            target,
            measured: format!(
                "{} beside each run; {} against the floor before the runs",
                spread(b, x),
                spread(before, x)
            ),
            met: Some(median(b.to_vec()) >= at_least),
        },
        None => Target { name, target, measured: spread(before, x), met: Some(median(before.to_vec()) >= at_least) },
    }
}

/// At most one run in six may miss: 5 of 6, 10 of 12, and none of fewer than 6.
fn enough_runs(within: usize, runs: usize) -> bool {
    runs > 0 && runs - within <= runs / 6
}

/// Confirmer rows/s at the scale run are "independent of entries cached" when they stay
/// within 10 % of the first seeding's, or within 100 rows/s of it (a few rows a second is
/// noise, not growth).
fn independent(base: f64, scale: f64) -> bool {
    scale <= base * 1.1 || scale - base <= 100.0
}

impl Results {
    pub fn targets(&mut self) {
        let runs = &self.runs;
        let of = |f: fn(&crate::report::RepeatRun) -> f64| runs.iter().map(f).collect::<Vec<f64>>();
        let (on_ratio, off_ratio) = (of(|r| r.ratio_cache_on), of(|r| r.ratio_cache_off));
        let on_beside: Option<Vec<f64>> = runs.iter().map(|r| r.ratio_to_floor_beside).collect();
        let off_beside: Option<Vec<f64>> = runs.iter().map(|r| r.ratio_off_to_floor_beside).collect();
        let pg_us = of(|r| r.cache_on.postgres_cpu_us_per_handout);
        let svc_us = of(|r| r.cache_on.service_cpu_us_per_request);
        let us = |v: f64| format!("{v:.1} µs");
        let (p99_on, p99_off) = self.half_rate_p99_within_5ms();
        // The control: the bare handler at the cached lookup's half rate, on this machine.
        let control = self.ceiling.as_ref().map_or(String::new(), |c| {
            format!("; a bare handler at {} req/s: p99 {}", thousands(c.half_rate.rps), ms(c.half_rate.p99_us))
        });
        let misses: Vec<Option<i64>> = runs.iter().map(|r| r.cache_on.db_lookups).collect();
        let lowest_hit = runs.iter().filter_map(|r| r.cache_on.cache_hit_rate).fold(f64::INFINITY, f64::min);
        let errors = self.errors();
        let n = runs.len();
        let mut t = vec![
            against_floor("cached lookup vs floor (no TLS)", 1.5, &on_ratio, on_beside.as_deref()),
            against_floor("uncached lookup vs floor (no TLS)", 0.5, &off_ratio, off_beside.as_deref()),
            Target {
                name: "cache hit rate",
                target: "100 % in every run".into(),
                measured: if misses.iter().all(Option::is_some) {
                    format!(
                        "lowest {:.3} %; lookups that reached Postgres per run: {}",
                        lowest_hit * 100.0,
                        misses.iter().flatten().map(|m| thousands(*m as f64)).collect::<Vec<_>>().join(", ")
                    )
                } else {
                    "n/a (Postgres's counters missing)".into()
                },
                met: misses.iter().all(Option::is_some).then(|| misses.iter().all(|m| *m == Some(0))),
            },
            Target { name: "errors", target: "0".into(), measured: errors.to_string(), met: Some(errors == 0) },
            Target {
                name: "Postgres CPU per cached hand-out",
                target: "≤ 5 µs".into(),
                measured: spread(&pg_us, us),
                met: Some(median(pg_us.clone()) <= 5.0),
            },
            Target {
                name: "service CPU per cached request, saturating",
                target: "≤ 25 µs".into(),
                measured: spread(&svc_us, us),
                met: Some(median(svc_us.clone()) <= 25.0),
            },
            Target {
                name: "p99 at half rate, cache on",
                target: "≤ 5 ms in ≥ 5 of 6 runs".into(),
                measured: format!(
                    "{p99_on} of {n} runs{}{control}",
                    if n < 6 { " (judge with --repeat 6)" } else { "" }
                ),
                met: Some(enough_runs(p99_on, n)),
            },
            Target {
                name: "p99 at half rate, cache off",
                target: "≤ 5 ms in ≥ 5 of 6 runs".into(),
                measured: format!(
                    "{p99_off} of {n} runs{}{control}",
                    if n < 6 { " (judge with --repeat 6)" } else { "" }
                ),
                met: Some(enough_runs(p99_off, n)),
            },
            self.confirmer_target(),
        ];
        t.extend(self.check_targets());
        t.extend(self.scale_targets());
        t.extend(self.proxy_targets());
        t.extend(self.key_store_targets());
        t.push(self.workload_target());
        t.extend(self.ceiling_target());
        t.push(self.generator_target());
        t.extend(self.storm_and_key_targets());
        self.targets = t;
    }

    /// Issue 46: where the framework's own ceiling is below 1.5 × the floor, the cached
    /// lookup is judged against that ceiling (≥ 0.85 ×) instead. With a floor and a
    /// ceiling beside each run, on the medians of the runs' own ratios.
    fn ceiling_target(&self) -> Option<Target> {
        let c = self.ceiling.as_ref()?;
        let beside: Option<Vec<(f64, f64)>> = self
            .runs
            .iter()
            .map(|r| Some((r.ceiling_beside.as_ref()?.rps, r.floor_beside.as_ref()?.tps.max(1.0))))
            .collect();
        let (ceiling, over_floor, how) = match beside.filter(|b| !b.is_empty()) {
            Some(b) => (
                median(b.iter().map(|(c, _)| *c).collect()),
                median(b.iter().map(|(c, f)| c / f).collect()),
                "medians of the runs, each beside its own floor and ceiling",
            ),
            None => {
                let floor = self.floor.plain.best_tps().max(1.0);
                (c.saturating.rps, c.saturating.rps / floor, "one ceiling after the runs")
            }
        };
        Some(Target {
            name: "cached lookup vs framework ceiling",
            target: "≥ 0.85 × ceiling where ceiling < 1.5 × floor".into(),
            measured: format!(
                "{:.2} × ({} req/s ceiling, {over_floor:.2} × the floor; {how})",
                c.cached_ratio,
                thousands(ceiling),
            ),
            met: (over_floor < 1.5).then_some(c.cached_ratio >= 0.85),
        })
    }

    /// Issue 46: the cached lookup's ratio to the framework's ceiling under the bench's
    /// generator (the check instance's reference loop) and under `oha` (on the same
    /// instance right after it), each ceiling measured by the same generator: the two
    /// ratios within 10 % of each other. The rates themselves differ on 2 cores (the cheaper
    /// generator leaves the server more CPU); what is judged against the ceiling must not.
    fn generator_target(&self) -> Target {
        let name = "cached ÷ ceiling, generator vs oha";
        let target = "within 10 %".to_owned();
        let measured = match (&self.check, &self.ceiling) {
            (Some(c), Some(ceiling)) => match (&c.oha, &ceiling.oha) {
                (Ok(cached), Ok(bare)) => Ok((
                    c.reference.rps / ceiling.saturating.rps.max(1e-9),
                    cached.rps / bare.rps.max(1e-9),
                    c.reference.rps / cached.rps.max(1e-9),
                )),
                (Err(why), _) | (_, Err(why)) => Err(why.clone()),
            },
            _ => Err("needs the check instance and the ceiling phase".to_owned()),
        };
        match measured {
            Ok((bench, oha, rates)) => Target {
                name,
                target,
                measured: format!(
                    "{g} {bench:.2} ×, oha {oha:.2} × the ceiling: {:.2} apart (the rates: {g} ÷ oha {rates:.2})",
                    bench / oha.max(1e-9),
                    g = self.check.as_ref().map_or("bench", |c| c.reference.generator),
                ),
                met: Some((bench / oha.max(1e-9) - 1.0).abs() <= 0.10),
            },
            Err(why) => Target { name, target, measured: format!("n/a ({why})"), met: None },
        }
    }

    /// Issue 42's rows: judged where the proxy phase ran.
    fn proxy_targets(&self) -> Vec<Target> {
        let Some(p) = &self.proxy else {
            return vec![Target {
                name: "proxied GET vs straight",
                target: "≥ 0.6 ×".into(),
                measured: "n/a (--proxy-phase false)".into(),
                met: None,
            }];
        };
        vec![
            Target {
                name: "proxied GET vs straight",
                target: "≥ 0.6 ×".into(),
                measured: format!(
                    "{:.2} × ({} vs {} req/s)",
                    p.ratio,
                    thousands(p.proxied.rps),
                    thousands(p.direct.rps)
                ),
                met: Some(p.ratio >= 0.6),
            },
            Target {
                name: "p50 the proxy adds, one connection",
                target: "≤ 0.3 ms".into(),
                measured: format!("{:.3} ms", p.added_p50_ms),
                met: Some(p.added_p50_ms <= 0.3),
            },
            Target {
                name: "RSS growth, 10 MiB streamed through",
                target: "≤ 2 MiB".into(),
                measured: format!("{:.2} MiB", p.stream.rss_growth_mib),
                met: Some(p.stream.rss_growth_mib <= 2.0),
            },
        ]
    }

    /// Issue 43's rows: each store against the keyring in the same run.
    fn key_store_targets(&self) -> Vec<Target> {
        let Some(k) = &self.key_stores else {
            return vec![Target {
                name: "hand-out, HSM/KMS vs keyring",
                target: "≥ 0.95 ×".into(),
                measured: "n/a (--key-store-phase false)".into(),
                met: None,
            }];
        };
        let mut t = Vec::new();
        for store in ["pkcs11", "aws-kms"] {
            let Some(r) = k.ratios.iter().find(|r| r.store == store) else {
                let why = k.skipped.iter().find(|s| s.starts_with(store)).cloned().unwrap_or_default();
                t.push(Target {
                    name: if store == "pkcs11" { "hand-out, pkcs11 vs local" } else { "hand-out, aws-kms vs local" },
                    target: "≥ 0.95 ×".into(),
                    measured: format!("not run: {why}"),
                    met: Some(false),
                });
                continue;
            };
            let (cached, uncached) = if store == "pkcs11" {
                ("cached hand-out, pkcs11 vs local", "uncached hand-out, pkcs11 vs local")
            } else {
                ("cached hand-out, aws-kms vs local", "uncached hand-out, aws-kms vs local")
            };
            t.push(Target {
                name: cached,
                target: "≥ 0.95 ×".into(),
                measured: format!("{:.2} ×", r.cached),
                met: Some(r.cached >= 0.95),
            });
            t.push(Target {
                name: uncached,
                target: "≥ 0.95 × (data key cached)".into(),
                measured: format!("{:.2} ×", r.uncached),
                met: Some(r.uncached >= 0.95),
            });
        }
        let rotations = k.rotations.iter().map(|r| format!("{} {:.2} s", r.store, r.seconds)).collect::<Vec<_>>();
        t.push(Target {
            name: "KEK rotation, 1,000 tenants' data keys",
            target: "reported".into(),
            measured: rotations.join(", "),
            met: None,
        });
        t
    }

    /// Issue 44's row: the cached path with a workload token within 10 % of the API key.
    fn workload_target(&self) -> Target {
        let name = "cached hand-out, workload token vs API key";
        let target = "≥ 0.90 ×".to_owned();
        match &self.workload {
            None => Target { name, target, measured: "n/a (--workload-phase false)".into(), met: None },
            Some(w) => Target { name, target, measured: format!("{:.2} ×", w.ratio), met: Some(w.ratio >= 0.90) },
        }
    }

    fn errors(&self) -> u64 {
        let lookups: u64 = self
            .runs
            .iter()
            .flat_map(|r| [&r.cache_on, &r.cache_off])
            .chain(self.scale.iter().flat_map(|s| [&s.lookup, &s.before, &s.after]))
            // The warm-up counts: with the cache on it asks every key once and is where each
            // answer's body is checked (wrk, sending the saturating loops, reads none).
            .map(|l| l.warmup.errors + l.saturating.errors + l.half_rate.errors)
            .sum();
        let check = self.check.as_ref().map_or(0, |c| {
            c.reference.errors
                + c.slowed.as_ref().map_or(0, |s| s.saturating.errors)
                + c.oha.as_ref().map_or(0, |o| o.errors)
        });
        let proxy = self
            .proxy
            .as_ref()
            .map_or(0, |p| [&p.direct, &p.proxied, &p.direct_one, &p.proxied_one].iter().map(|s| s.errors).sum());
        let ceiling = self.ceiling.as_ref().map_or(0, |c| c.saturating.errors + c.oha.as_ref().map_or(0, |o| o.errors));
        let key_stores = self.key_stores.as_ref().map_or(0, crate::keystores::KeyStoresRun::errors);
        let workload = self.workload.as_ref().map_or(0, crate::workload::WorkloadRun::errors);
        lookups + check + proxy + ceiling + key_stores + workload + self.storm.errors as u64
    }

    /// The confirmer's reads per second (the change log: it reads nothing else since issue
    /// 26) at the first seeding (median run) and at scale. The rows of `connections` read
    /// by id are shown beside them: the audit writer's join, one per audit row of hand-outs
    /// not served from the cache (a row served from it names its connection from the
    /// cache's entry), so they follow those rows, not the entries cached.
    fn confirmer_target(&self) -> Target {
        let rates: Vec<(Option<f64>, Option<f64>)> = self.runs.iter().map(|r| r.cache_on.confirmer_rates()).collect();
        let base_log = rates.iter().map(|r| r.1).collect::<Option<Vec<f64>>>().map(median);
        let base_id = rates.iter().map(|r| r.0).collect::<Option<Vec<f64>>>().map(median);
        let fmt = |v: Option<f64>| v.map_or("n/a".to_owned(), |r| format!("{}/s", thousands(r)));
        let scale = self.scale.as_ref().map(|s| (s.connections, s.lookup.confirmer_rates()));
        let mut measured = format!(
            "at {}: change log {} (connections by id, the audit join: {})",
            thousands(self.setup.connections as f64),
            fmt(base_log),
            fmt(base_id)
        );
        let mut met = None;
        if let Some((n, (id, log))) = scale {
            measured.push_str(&format!(
                "; at {}: change log {} (audit join: {})",
                thousands(n as f64),
                fmt(log),
                fmt(id)
            ));
            met = base_log.zip(log).map(|(base, scale)| independent(base, scale));
        } else {
            measured.push_str(" (scale: not run, --scale-connections)");
        }
        Target {
            name: "confirmer rows read/s vs entries cached",
            target: "independent of entries cached".into(),
            measured,
            met,
        }
    }

    fn check_targets(&self) -> Vec<Target> {
        let Some(c) = &self.check else { return Vec::new() };
        let mut t = Vec::new();
        if let Some(s) = &c.slowed {
            t.push(Target {
                name: "cached rate, PostgreSQL slowed",
                target: "within 20 % of the unslowed run".into(),
                measured: format!(
                    "{:.2} × ({} vs {} req/s)",
                    s.ratio,
                    thousands(s.saturating.rps),
                    thousands(c.reference.rps)
                ),
                met: Some(s.ratio >= 0.8),
            });
            t.push(Target {
                name: "cache hit rate, PostgreSQL slowed",
                target: "100 %".into(),
                measured: match (s.hit_rate_at_least, c.db_lookups_after_warmup) {
                    (Some(h), Some(d)) => {
                        format!("≥ {:.3} % ({} lookups reached Postgres)", h * 100.0, thousands(d as f64))
                    }
                    _ => "n/a".into(),
                },
                met: c.db_lookups_after_warmup.map(|d| d == 0),
            });
        }
        t
    }

    fn scale_targets(&self) -> Vec<Target> {
        let mut t = vec![Target {
            name: "peak RSS, first seeding cached",
            target: "≤ 64 MiB".into(),
            measured: format!(
                "{:.1} MiB ({} connections)",
                self.peak_rss_mib,
                thousands(self.setup.connections as f64)
            ),
            met: Some(self.peak_rss_mib <= 64.0),
        }];
        match &self.scale {
            Some(s) => {
                t.push(Target {
                    name: "cached rate at scale",
                    target: format!(
                        "within 10 % of the {}-key runs beside it",
                        thousands(self.setup.connections as f64)
                    ),
                    measured: format!(
                        "{:.2} × at {} connections ({} req/s) against the runs at {} keys beside it \
                         ({} and {} req/s); {:.2} × row 8's median",
                        s.ratio_to_beside(),
                        thousands(s.connections as f64),
                        thousands(s.lookup.saturating.rps),
                        thousands(self.setup.connections as f64),
                        thousands(s.beside()[0]),
                        thousands(s.beside()[1]),
                        s.ratio_to_first_seeding,
                    ),
                    met: Some(s.ratio_to_beside() >= 0.9),
                });
                t.push(Target {
                    name: "peak RSS at scale",
                    target: "stated".into(),
                    measured: format!(
                        "{:.1} MiB at {} connections, cache capacity {}",
                        s.peak_rss_mib,
                        thousands(s.connections as f64),
                        thousands(s.cache_capacity as f64)
                    ),
                    met: None,
                });
            }
            None => t.push(Target {
                name: "cached rate at scale",
                target: "within 10 % of the first seeding".into(),
                measured: "not run (--scale-connections 1000000)".into(),
                met: None,
            }),
        }
        t
    }

    fn storm_and_key_targets(&self) -> Vec<Target> {
        vec![
            Target {
                name: "refresh storm",
                target: "1 refresh call, every caller the new token".into(),
                measured: format!(
                    "{} call(s), {}/{} new token",
                    self.storm.refresh_calls, self.storm.got_new_token, self.storm.callers
                ),
                met: Some(self.storm.refresh_calls == 1 && self.storm.got_new_token == self.storm.callers),
            },
            Target {
                name: "cached API-key check",
                target: "≤ 50 µs".into(),
                measured: format!("{:.1} µs median", self.api_key.cached_median_us),
                met: Some(self.api_key.cached_median_us <= 50.0),
            },
            Target {
                name: "first API-key check",
                // A key made today carries its fast verifier (`api_keys`): its first check
                // runs no argon2 at all; one made before verifiers runs it once.
                target: "at most one argon2 verify".into(),
                measured: format!(
                    "{} argon2 run(s), {:.1} ms (one verify alone {:.1} ms)",
                    self.api_key.first_argon2_runs, self.api_key.first_ms, self.api_key.argon2_verify_ms
                ),
                met: Some(self.api_key.first_argon2_runs <= 1),
            },
            Target {
                name: "unknown API-key ids under a flood",
                target: "no argon2 run".into(),
                measured: format!(
                    "{} argon2 run(s) for {} first verifications of new keys",
                    self.api_key.flood_argon2_runs, self.api_key.flood_first_keys
                ),
                met: Some(self.api_key.flood_argon2_runs <= self.api_key.flood_first_keys as u64),
            },
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_is_judged_against_the_floor_beside_each_run_where_there_is_one() {
        let before = [1.6, 1.7, 1.8];
        // The floor before the runs alone would say met; the floors beside them say not.
        let t = against_floor("cached", 1.5, &before, Some(&[1.2, 1.4, 1.6]));
        assert_eq!(t.met, Some(false));
        assert!(t.measured.contains("1.40 × (1.20 ×–1.60 ×) beside each run"), "{}", t.measured);
        assert!(t.measured.contains("1.70 × (1.60 ×–1.80 ×) against the floor before the runs"), "{}", t.measured);
        assert_eq!(against_floor("cached", 1.5, &before, None).met, Some(true));
        assert_eq!(against_floor("cached", 1.5, &[1.4], Some(&[])).met, Some(false));
    }

    #[test]
    fn five_of_six_runs_is_enough_and_four_is_not() {
        assert!(enough_runs(5, 6));
        assert!(!enough_runs(4, 6));
        assert!(enough_runs(10, 12));
        assert!(enough_runs(2, 2));
        assert!(!enough_runs(1, 2));
        assert!(!enough_runs(0, 0));
    }

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(Vec::new()), 0.0);
    }

    #[test]
    fn confirmer_reads_that_grow_with_the_table_are_not_independent() {
        assert!(independent(40_000.0, 42_000.0));
        assert!(independent(2.0, 90.0));
        assert!(!independent(40_000.0, 400_000.0));
    }
}
