//! A fuzz target for the JSON planning interface on stable Rust (no cargo-fuzz): proptest
//! generates planning problems with extreme values (sizes and alignments near 2^63, size hints
//! of 0 or 2^64 - 1, negative and fractional numbers, unknown names, duplicates, empty and
//! reversed live ranges), mutates their text (cuts, JSON tokens and extreme numbers inserted,
//! spans duplicated) and builds arbitrary JSON documents from the interface's vocabulary.
//! Every document goes through `plan_json` with every algorithm at a limit of a few
//! milliseconds. Every plan must pass the independent verifier against the problem as parsed and
//! stay above the reported lower bound; every error must be one line, and after a successful
//! parse only "fits none of its candidate pools"; a panic fails the case.
//!
//! `HERON_FUZZ_CASES` sets the number of documents (default 500) and `HERON_FUZZ_SEED` the seed
//! (default fixed, so runs are reproducible), e.g.
//! `HERON_FUZZ_CASES=100000 HERON_FUZZ_SEED=7 cargo test --release -p heron-planner --test fuzz_json`.

use std::cell::Cell;

use heron_planner::json::{PlanJson, parse_problem, plan_json};
use heron_planner::{Budget, BufferInfo, Plan, PlanError, PoolAllocation, PoolInfo, registry, verify_plan};
use proptest::prelude::*;
use proptest::sample::{Index, select};
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};
use serde_json::{Number, Value, json};

/// Numbers as the interface meets them: mostly small sizes, often the extremes.
fn number() -> impl Strategy<Value = Value> {
    let extreme = [0, 1, 1 << 62, (1 << 62) + 1, (1 << 63) - 1, 1 << 63, u64::MAX - 1, u64::MAX];
    let odd = [-1.0, -0.0, 0.5, 1.5, 2.0, 1e19, 1.8446744073709552e19, 1e30, -9.3e18];
    prop_oneof![
        200 => (1u64..600).prop_map(Value::from),
        6 => select(extreme.to_vec()).prop_map(Value::from),
        1 => select(vec![-1i64, i64::MIN]).prop_map(Value::from),
        1 => select(odd.to_vec()).prop_map(|f| Value::Number(Number::from_f64(f).expect("finite"))),
    ]
}

/// Alignments: mostly small powers of two, sometimes any power up to 2^63 or no power at all.
fn alignment() -> impl Strategy<Value = Value> {
    prop_oneof![
        60 => (0u32..7).prop_map(|k| Value::from(1u64 << k)),
        4 => (0u32..64).prop_map(|k| Value::from(1u64 << k)),
        1 => number(),
    ]
}

/// A planning problem of up to 3 pools and 13 buffers, mostly well-formed.
fn problem() -> impl Strategy<Value = Value> {
    (1usize..4, 1usize..14)
        .prop_flat_map(|(pools, buffers)| {
            let pool = (
                prop_oneof![2 => Just(Value::Null), 3 => (0u64..2000).prop_map(Value::from), 1 => number()],
                prop::option::weighted(0.2, alignment()),
                prop_oneof![100 => Just("workspace"), 25 => Just("constant"), 1 => Just("flash")],
            );
            // Indices one past the end name unknown pools or buffers.
            let index = |n: usize| prop_oneof![300 => 0..n, 1 => Just(n)];
            let buffer = (
                number(),
                prop::option::weighted(0.7, alignment()),
                prop::collection::vec(index(buffers), 0..buffers.min(6) + 1),
                (
                    prop::sample::subsequence((0..pools).collect::<Vec<_>>(), 1..=pools).prop_shuffle(),
                    prop::option::weighted(0.01, index(pools)),
                ),
                prop::option::weighted(
                    0.4,
                    (
                        prop_oneof![50 => 0u64..40, 1 => select(vec![1 << 63, u64::MAX - 12, u64::MAX - 1])],
                        prop_oneof![100 => 1u64..12, 1 => Just(0)],
                    ),
                ),
                prop::bool::weighted(0.01),
            );
            (prop::collection::vec(pool, pools), prop::collection::vec(buffer, buffers), prop::bool::weighted(0.01))
        })
        .prop_map(|(pools, buffers, duplicate_pool)| {
            let pool_name = |k: usize| format!("p{}", if duplicate_pool { 0 } else { k });
            let pools: Vec<Value> = pools
                .into_iter()
                .enumerate()
                .map(|(k, (hint, alignment, kind))| {
                    let mut p = json!({"name": pool_name(k), "size_hint_bytes": hint, "kind": kind});
                    if let Some(a) = alignment {
                        p["alignment"] = a;
                    }
                    p
                })
                .collect();
            let n = buffers.len();
            let buffers: Vec<Value> = buffers
                .into_iter()
                .enumerate()
                .map(|(i, (size, alignment, conflicts, candidates, live, duplicate))| {
                    let name = |j: usize| if j == n { "nobody".to_string() } else { format!("b{j}") };
                    // Rarely one more: a duplicate or an unknown pool.
                    let (mut candidates, extra) = candidates;
                    candidates.extend(extra);
                    let candidates: Vec<String> = candidates.into_iter().map(pool_name).collect();
                    let mut b = json!({
                        "name": if duplicate { name(0) } else { name(i) },
                        "size_bytes": size,
                        "conflicts": conflicts.into_iter().map(name).collect::<Vec<_>>(),
                        "pool_candidates": candidates,
                    });
                    if let Some(a) = alignment {
                        b["alignment"] = a;
                    }
                    if let Some((start, len)) = live {
                        // Length 0 (or saturating at the end of time) makes an empty range.
                        b["live_range"] = json!([start, start.saturating_add(len)]);
                    }
                    b
                })
                .collect();
            json!({"pools": pools, "buffers": buffers})
        })
}

/// Text inserted by mutations: JSON structure, extreme numbers, names and keys.
const TOKENS: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\"",
    "null",
    "true",
    "-",
    "0",
    "-1",
    "1e400",
    "0.5",
    "18446744073709551616",
    "9223372036854775808",
    "4611686018427387904",
    "\"b0\"",
    "\"p0\"",
    "\"size_bytes\":",
    "\"conflicts\":[\"b0\"]",
    "\"live_range\":[3,1]",
    "\\u0000",
    "\u{e9}",
    "[[[[[[[[",
    "{\"a\":",
];

#[derive(Clone, Debug)]
enum Mutation {
    Cut(Index, usize),
    Insert(Index, &'static str),
    Duplicate(Index, usize),
}

fn mutated() -> impl Strategy<Value = String> {
    let mutation = prop_oneof![
        (any::<Index>(), 1usize..12).prop_map(|(at, len)| Mutation::Cut(at, len)),
        (any::<Index>(), select(TOKENS)).prop_map(|(at, token)| Mutation::Insert(at, token)),
        (any::<Index>(), 1usize..40).prop_map(|(at, len)| Mutation::Duplicate(at, len)),
    ];
    (problem(), prop::collection::vec(mutation, 1..4)).prop_map(|(problem, mutations)| {
        let mut text = problem.to_string().into_bytes();
        for m in mutations {
            match m {
                Mutation::Cut(at, len) => {
                    let at = at.index(text.len());
                    text.drain(at..(at + len).min(text.len()));
                }
                Mutation::Insert(at, token) => {
                    let at = at.index(text.len() + 1);
                    text.splice(at..at, token.bytes());
                }
                Mutation::Duplicate(at, len) => {
                    let at = at.index(text.len());
                    let span = text[at..(at + len).min(text.len())].to_vec();
                    text.splice(at..at, span);
                }
            }
        }
        String::from_utf8_lossy(&text).into_owned()
    })
}

/// Arbitrary JSON built from the interface's keys and values.
fn arbitrary() -> impl Strategy<Value = String> {
    const WORDS: &[&str] = &[
        "pools",
        "buffers",
        "name",
        "size_bytes",
        "alignment",
        "conflicts",
        "pool_candidates",
        "live_range",
        "size_hint_bytes",
        "kind",
        "targets",
        "b0",
        "b1",
        "p0",
        "workspace",
        "constant",
        "cpu",
        "rw",
        "",
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        number(),
        select(WORDS).prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((select(WORDS), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect())),
        ]
    })
    .prop_map(|v| v.to_string())
}

fn document() -> impl Strategy<Value = (String, u64)> {
    let text = prop_oneof![5 => problem().prop_map(|p| p.to_string()), 4 => mutated(), 1 => arbitrary()];
    (text, select(vec![1u64, 2, 2, 25]))
}

/// The plan `answer` describes, in the terms of the parsed problem.
fn plan_of(answer: &PlanJson, buffers: &[BufferInfo], pools: &[PoolInfo]) -> Result<Plan, TestCaseError> {
    let pool_index = |name: &str| {
        pools.iter().position(|p| p.name == name).ok_or_else(|| TestCaseError::fail(format!("unknown pool {name}")))
    };
    if answer.allocations.len() != buffers.len() {
        return Err(TestCaseError::fail("one allocation per buffer"));
    }
    let allocations = answer
        .allocations
        .iter()
        .zip(buffers)
        .map(|(a, b)| {
            prop_assert_eq!(&a.buffer, &b.name);
            Ok(PoolAllocation { pool: pool_index(&a.pool)?, offset: a.offset })
        })
        .collect::<Result<Vec<_>, TestCaseError>>()?;
    let pool_sizes = pools.iter().map(|p| answer.pool_sizes[&p.name].as_u64().unwrap_or(u64::MAX)).collect();
    Ok(Plan { algorithm: answer.algorithm.clone(), allocations, pool_sizes })
}

/// Outcomes seen: plans, planning failures ("fits none"), rejected documents.
#[derive(Default)]
struct Tally {
    plans: Cell<u64>,
    no_fit: Cell<u64>,
    rejected: Cell<u64>,
}

fn bump(c: &Cell<u64>) {
    c.set(c.get() + 1);
}

fn check(text: &str, limit_ms: u64, tally: &Tally) -> Result<(), TestCaseError> {
    let parsed = parse_problem(text);
    for alg in registry() {
        let result = plan_json(text, alg.name(), &Budget::work(limit_ms * 100_000));
        bump(match &result {
            Ok(_) => &tally.plans,
            Err(PlanError::NoPoolFits { .. }) => &tally.no_fit,
            Err(_) => &tally.rejected,
        });
        match result {
            Ok(answer) => {
                let (buffers, pools) = parsed
                    .as_ref()
                    .map_err(|e| TestCaseError::fail(format!("{} planned what parsing rejects: {e}", alg.name())))?;
                let plan = plan_of(&answer, buffers, pools)?;
                if let Err(e) = verify_plan(buffers, pools, &plan) {
                    return Err(TestCaseError::fail(format!("{}: invalid plan: {e:?}", alg.name())));
                }
                let total = plan.pool_sizes.iter().try_fold(0u64, |t, &s| t.checked_add(s));
                prop_assert!(total.is_some_and(|t| t >= answer.lower_bound_bytes), "{}: below the bound", alg.name());
            }
            Err(e) => {
                let msg = e.to_string();
                prop_assert!(!msg.contains('\n') && !msg.is_empty(), "{}: {msg:?}", alg.name());
                let planning_failed = matches!(e, PlanError::NoPoolFits { .. });
                prop_assert!(
                    !matches!(e, PlanError::Invalid(_)) && (parsed.is_err() || planning_failed),
                    "{}: {msg}",
                    alg.name()
                );
            }
        }
    }
    Ok(())
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[test]
fn json_interface_survives_fuzzing() {
    let cases = env("HERON_FUZZ_CASES", 500) as u32;
    let seed = env("HERON_FUZZ_SEED", 0x4E52_0F0C);
    let config = Config { cases, rng_seed: RngSeed::Fixed(seed), failure_persistence: None, ..Config::default() };

    let mut runner = TestRunner::new(config);
    let tally = Tally::default();
    let result = runner.run(&document(), |(text, limit_ms)| check(&text, limit_ms, &tally));
    if let Err(e) = result {
        panic!("seed {seed}: {e}");
    }
    eprintln!(
        "fuzzed {cases} documents (seed {seed}) x {} algorithms: {} plans verified, {} fit no pool, {} rejected",
        registry().len(),
        tally.plans.get(),
        tally.no_fit.get(),
        tally.rejected.get()
    );
}
