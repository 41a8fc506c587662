//! The layering rules of SPEC §1, enforced: the core never names a platform SDK or an
//! adapter crate, and adapters depend on nothing of Ferry's but the contract crate.

use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Files of the binary allowed to name adapters: `main.rs` and the module that wires the
/// adapters in.
const WIRING_FILES: [&str; 2] = ["src/main.rs", "src/wiring.rs"];

/// Names that mark platform code: the SDK crates (in `use` and path form) and our adapters.
const FORBIDDEN_IN_CORE: [&str; 10] = [
    "teloxide",
    "serenity",
    "slack_morphism",
    "slack-morphism",
    "ferry_telegram",
    "ferry-telegram",
    "ferry_discord",
    "ferry-discord",
    "ferry_slack",
    "ferry-slack",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

fn core_violations(root: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    let mut violations = Vec::new();
    for file in files {
        let relative = file.strip_prefix(root).expect("under root").to_string_lossy().replace('\\', "/");
        if WIRING_FILES.contains(&relative.as_str()) {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("read source");
        for (number, line) in text.lines().enumerate() {
            for name in FORBIDDEN_IN_CORE {
                if line.contains(name) {
                    violations.push(format!("{relative}:{}: names `{name}`", number + 1));
                }
            }
        }
    }
    violations
}

#[test]
fn core_code_never_names_a_platform_sdk_or_an_adapter() {
    let violations = core_violations(Path::new(ROOT));
    assert!(violations.is_empty(), "core code must go through ferry-channel:\n{}", violations.join("\n"));
}

#[test]
fn the_core_check_catches_a_violation() {
    let scratch = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(scratch.path().join("src/reply")).unwrap();
    std::fs::write(scratch.path().join("src/main.rs"), "use ferry_telegram::capabilities;").unwrap();
    std::fs::write(scratch.path().join("src/reply/send.rs"), "use teloxide::Bot;").unwrap();
    assert_eq!(core_violations(scratch.path()), ["src/reply/send.rs:1: names `teloxide`"]);
}

/// Every dependency an adapter's manifest declares, from all dependency tables.
fn declared_dependencies(manifest: &toml::Table) -> Vec<String> {
    let mut tables: Vec<&toml::Table> = Vec::new();
    for kind in ["dependencies", "dev-dependencies", "build-dependencies"] {
        if let Some(table) = manifest.get(kind).and_then(toml::Value::as_table) {
            tables.push(table);
        }
    }
    if let Some(targets) = manifest.get("target").and_then(toml::Value::as_table) {
        for target in targets.values().filter_map(toml::Value::as_table) {
            for kind in ["dependencies", "dev-dependencies", "build-dependencies"] {
                if let Some(table) = target.get(kind).and_then(toml::Value::as_table) {
                    tables.push(table);
                }
            }
        }
    }
    tables
        .into_iter()
        .flat_map(|table| {
            table.iter().map(|(name, spec)| {
                // `alias = { package = "real-name", … }` renames; judge the real crate.
                spec.get("package").and_then(toml::Value::as_str).unwrap_or(name).to_owned()
            })
        })
        .collect()
}

#[test]
fn adapters_depend_on_nothing_of_ferry_but_the_contract() {
    let adapters = Path::new(ROOT).join("adapters");
    let mut checked = 0;
    for entry in std::fs::read_dir(&adapters).expect("adapters dir") {
        let dir = entry.expect("entry").path();
        let manifest_path = dir.join("Cargo.toml");
        if !manifest_path.is_file() {
            continue;
        }
        let manifest: toml::Table = std::fs::read_to_string(&manifest_path).unwrap().parse().unwrap();
        let package = manifest["package"]["name"].as_str().unwrap_or_default().to_owned();
        if package == "ferry-channel" {
            // The contract itself depends on no Ferry crate at all.
            let ferry_deps: Vec<_> =
                declared_dependencies(&manifest).into_iter().filter(|d| d.starts_with("ferry")).collect();
            assert!(ferry_deps.is_empty(), "ferry-channel must not depend on {ferry_deps:?}");
        } else {
            // Tests may use the fake platform servers: ferry-fakes depends on no Ferry crate.
            let keys = |kind: &str| -> Vec<String> {
                manifest
                    .get(kind)
                    .and_then(toml::Value::as_table)
                    .map(|t| t.keys().cloned().collect())
                    .unwrap_or_default()
            };
            let normal = keys("dependencies");
            let dev_only: Vec<String> = keys("dev-dependencies").into_iter().filter(|d| !normal.contains(d)).collect();
            for dependency in declared_dependencies(&manifest) {
                let test_helper = dependency == "ferry-fakes" && dev_only.contains(&dependency);
                assert!(
                    !dependency.starts_with("ferry") || dependency == "ferry-channel" || test_helper,
                    "{package} depends on {dependency}; adapters may only use ferry-channel (and ferry-fakes in tests)"
                );
            }
        }
        checked += 1;
    }
    assert_eq!(checked, 4, "expected the contract and three adapter crates under adapters/");
}

// The import graph's rules (issue 38): `config` and `state` are the floors the house stands
// on, so no chain of imports may lead back into them; two files never import each other.

mod imports;

use std::collections::BTreeMap;
use std::sync::OnceLock;

use imports::{ImportGraph, cycle_through};

fn crate_graph() -> &'static ImportGraph {
    static GRAPH: OnceLock<ImportGraph> = OnceLock::new();
    GRAPH.get_or_init(|| ImportGraph::read(Path::new(ROOT)))
}

/// What `state` may name besides itself: the config below it, the metrics it counts lease
/// events in, and the leaf of shared value types.
const BELOW_STATE: [&str; 3] = ["config", "metrics", "types"];

/// Each hop of a module chain, with a file edge that makes it.
fn explain(chain: &[String], edges: &BTreeMap<String, BTreeMap<String, (String, String)>>) -> String {
    chain
        .windows(2)
        .map(|hop| {
            let (from, to) = &edges[&hop[0]][&hop[1]];
            format!("  {} -> {} ({from} names {to})", hop[0], hop[1])
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn floor_cycles(graph: &ImportGraph) -> Vec<String> {
    let edges = graph.module_edges();
    ["config", "state"]
        .into_iter()
        .filter_map(|floor| cycle_through(&edges, floor).map(|chain| explain(&chain, &edges)))
        .collect()
}

#[test]
fn no_import_chain_leads_from_config_or_state_back_into_them() {
    let cycles = floor_cycles(crate_graph());
    assert!(cycles.is_empty(), "imports run in a circle through a floor:\n{}", cycles.join("\n\n"));
}

#[test]
fn config_names_only_modules_that_import_nothing_of_the_crate() {
    let edges = crate_graph().module_edges();
    let above: Vec<String> = edges
        .get("config")
        .into_iter()
        .flatten()
        .filter(|(module, _)| edges.get(*module).is_some_and(|targets| !targets.is_empty()))
        .map(|(module, (from, to))| format!("config -> {module} ({from} names {to})"))
        .collect();
    assert!(above.is_empty(), "config is the bottom floor:\n{}", above.join("\n"));
}

#[test]
fn state_names_only_the_floors_below_it() {
    let edges = crate_graph().module_edges();
    let above: Vec<String> = edges
        .get("state")
        .into_iter()
        .flatten()
        .filter(|(module, _)| !BELOW_STATE.contains(&module.as_str()))
        .map(|(module, (from, to))| format!("state -> {module} ({from} names {to})"))
        .collect();
    assert!(above.is_empty(), "state may name only {BELOW_STATE:?}:\n{}", above.join("\n"));
}

fn mutual_imports(graph: &ImportGraph) -> Vec<String> {
    let mut pairs = Vec::new();
    for (from, targets) in &graph.edges {
        for to in targets {
            let back = graph.edges.get(to).is_some_and(|their| their.contains(from));
            // A module and its own submodules share items both ways (`pub use child::X`,
            // `super::Y`); that is one module, not a circle.
            let related = graph.is_ancestor(from, to) || graph.is_ancestor(to, from);
            if back && !related && from < to {
                pairs.push(format!("{from} <-> {to}"));
            }
        }
    }
    pairs
}

#[test]
fn no_two_files_import_each_other() {
    let pairs = mutual_imports(crate_graph());
    assert!(pairs.is_empty(), "move what both need into one of them, or below both:\n{}", pairs.join("\n"));
}

#[test]
fn the_import_checks_catch_a_circle() {
    let scratch = tempfile::tempdir().unwrap();
    let src = scratch.path().join("src");
    std::fs::create_dir_all(src.join("state")).unwrap();
    std::fs::create_dir_all(src.join("config")).unwrap();
    std::fs::write(src.join("lib.rs"), "//! crate::nothing\npub mod config;\npub mod routing;\npub mod state;\n")
        .unwrap();
    std::fs::write(src.join("config/mod.rs"), "mod schema;\nmod agents;\n").unwrap();
    std::fs::write(src.join("config/schema.rs"), "use super::agents::Agents;\npub struct Config;\n").unwrap();
    std::fs::write(src.join("config/agents.rs"), "pub struct Agents(super::schema::Config);\n").unwrap();
    std::fs::write(src.join("routing.rs"), "use crate::state::{Store, inbound::Key};\npub const WINDOW: u8 = 1;\n")
        .unwrap();
    std::fs::write(src.join("state/mod.rs"), "pub mod inbound;\npub trait Store {}\n").unwrap();
    std::fs::write(
        src.join("state/inbound.rs"),
        "/// crate::config is only a comment here\npub struct Key;\nconst W: u8 = crate::routing::WINDOW;\n",
    )
    .unwrap();
    let graph = ImportGraph::read(scratch.path());
    assert_eq!(
        floor_cycles(&graph),
        [
            "  state -> routing (src/state/inbound.rs names src/routing.rs)\n  routing -> state (src/routing.rs names src/state/inbound.rs)"
        ]
    );
    assert_eq!(
        mutual_imports(&graph),
        ["src/config/agents.rs <-> src/config/schema.rs", "src/routing.rs <-> src/state/inbound.rs"]
    );
}

#[test]
fn the_map_in_lib_rs_names_every_top_level_module() {
    let lib = std::fs::read_to_string(Path::new(ROOT).join("src/lib.rs")).unwrap();
    let map: String = lib.lines().filter_map(|line| line.strip_prefix("//!")).collect::<Vec<_>>().join("\n");
    let missing: Vec<String> = crate_graph()
        .top_modules()
        .into_iter()
        .filter(|module| !map.contains(&format!("`{module}`")) && !map.contains(&format!("[`{module}`]")))
        .collect();
    assert!(missing.is_empty(), "src/lib.rs's map does not name {missing:?}");
}

/// Files of a backend that are the backend itself, not one store's implementation.
const BACKEND_FILES: [&str; 7] = ["mod", "batch", "migrations", "group_commit", "legacy", "lease_tests", "inbound_log"];

/// Stores one backend alone has, and why.
const ONE_BACKEND_STORES: [(&str, &str); 1] =
    [("leases", "one process on SQLite owns every session; leases are tested in postgres/lease_tests.rs")];

fn store_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            let stem = path.file_stem()?.to_str()?.to_owned();
            (!BACKEND_FILES.contains(&stem.as_str())).then_some(stem)
        })
        .collect();
    names.sort();
    names
}

#[test]
fn every_store_has_its_trait_both_backends_and_a_conformance_suite() {
    let state = Path::new(ROOT).join("src/state");
    let mut problems = Vec::new();
    let mut stores = store_names(&state.join("sqlite"));
    stores.extend(store_names(&state.join("postgres")));
    stores.sort();
    stores.dedup();
    for store in &stores {
        let exists = |path: PathBuf| path.is_file();
        if !exists(state.join(format!("{store}.rs"))) && !exists(state.join(store).join("mod.rs")) {
            problems.push(format!("{store}: no trait module src/state/{store}.rs"));
        }
        if ONE_BACKEND_STORES.iter().any(|(name, _)| name == store) {
            continue;
        }
        for place in ["sqlite", "postgres", "conformance"] {
            if !exists(state.join(place).join(format!("{store}.rs"))) {
                problems.push(format!("{store}: no src/state/{place}/{store}.rs"));
            }
        }
    }
    assert!(stores.len() >= 5, "found only {stores:?}");
    assert!(problems.is_empty(), "every store follows CONTRIBUTING.md's pattern:\n{}", problems.join("\n"));
}

#[test]
fn database_drivers_are_named_only_by_their_backends() {
    let mut files = Vec::new();
    rust_files(&Path::new(ROOT).join("src"), &mut files);
    let mut violations = Vec::new();
    for file in files {
        let relative = file.strip_prefix(ROOT).unwrap().to_string_lossy().replace('\\', "/");
        let source = std::fs::read_to_string(&file).unwrap();
        // `state copy` reads one backend and writes the other; `[state] postgres_url` is
        // checked with the driver's own parser, so what `config check` accepts connects.
        let copy = relative == "src/state/copy.rs";
        let url_check = relative == "src/config/state_schema.rs";
        for (driver, home) in [
            ("rusqlite", "src/state/sqlite/"),
            ("tokio_postgres", "src/state/postgres/"),
            ("deadpool_postgres", "src/state/postgres/"),
        ] {
            let excused = copy || (url_check && driver == "tokio_postgres");
            if !relative.starts_with(home) && !excused && imports::names(&source, driver) {
                violations.push(format!("{relative} names {driver}"));
            }
        }
    }
    assert!(violations.is_empty(), "domain code reaches stores through their traits:\n{}", violations.join("\n"));
}
