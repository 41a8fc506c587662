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
