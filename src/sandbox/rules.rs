//! The Landlock ruleset of a [`Confinement`]: what a sandboxed command may touch.
//!
//! Landlock only allows; it cannot deny a path inside an allowed directory. So a readable
//! directory that contains a hidden path (`/etc` holding `/etc/ferry/ferry.toml`) is
//! replaced by its children minus the hidden one, recursively ([`expand`]). A grant made
//! on purpose inside a hidden directory (the session workspace under the state directory)
//! still holds.

use std::io;
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreated, RulesetCreatedAttr, Scope,
};

use super::spec::Confinement;

/// The oldest Landlock ABI the sandbox accepts: 3 is the first to control `truncate`.
pub const MIN_ABI: i64 = 3;

/// The kernel's Landlock ABI version, or why there is none.
pub fn kernel_abi() -> Result<i64, String> {
    // SAFETY: LANDLOCK_CREATE_RULESET_VERSION with a null attribute only reads a number.
    let version = unsafe { libc::syscall(libc::SYS_landlock_create_ruleset, std::ptr::null::<u8>(), 0usize, 1u32) };
    if version >= 0 {
        return Ok(version);
    }
    Err(match io::Error::last_os_error().raw_os_error() {
        Some(libc::ENOSYS) => "the kernel has no Landlock (built without CONFIG_SECURITY_LANDLOCK)".to_owned(),
        Some(libc::EOPNOTSUPP) => "Landlock is disabled (add landlock to the kernel's lsm= boot parameter)".to_owned(),
        _ => format!("Landlock is unavailable: {}", io::Error::last_os_error()),
    })
}

/// Builds the ruleset, in the launcher before it drops privileges (opening the paths may
/// need them). It is enforced by `restrict_self`.
pub fn ruleset(confinement: &Confinement) -> Result<RulesetCreated, String> {
    let mut created = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(ABI::V3))
        .and_then(|ruleset| {
            ruleset.set_compatibility(CompatLevel::BestEffort).handle_access(AccessFs::from_all(ABI::V6))
        })
        .and_then(|ruleset| ruleset.scope(Scope::from_all(ABI::V6)))
        .and_then(|ruleset| ruleset.create())
        .map_err(|error| format!("cannot create the Landlock ruleset: {error}"))?;
    for (path, access) in grants(confinement).map_err(|error| format!("cannot list what to allow: {error}"))? {
        // A path that vanished is not granted: less access, never more.
        let Ok(fd) = PathFd::new(&path) else { continue };
        let is_dir = std::fs::metadata(&path).map(|meta| meta.is_dir()).unwrap_or(false);
        let access = if is_dir { access } else { access & AccessFs::from_file(ABI::V6) };
        created = created
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|error| format!("cannot allow {}: {error}", path.display()))?;
    }
    Ok(created)
}

/// Every path to grant and its access, hidden paths carved out.
pub fn grants(confinement: &Confinement) -> io::Result<Vec<(PathBuf, BitFlags<AccessFs>)>> {
    let hidden: Vec<PathBuf> = confinement.hidden.iter().map(|path| real(path)).collect();
    let mut grants = Vec::new();
    for root in &confinement.writable {
        // Granted even inside a hidden directory; hidden paths below it stay carved out.
        let root = real(root);
        let below: Vec<PathBuf> = hidden.iter().filter(|hidden| !root.starts_with(hidden)).cloned().collect();
        grants.extend(expand(&root, &below)?.into_iter().map(|path| (path, AccessFs::from_all(ABI::V6))));
    }
    for root in &confinement.readable {
        grants.extend(expand(root, &hidden)?.into_iter().map(|path| (path, AccessFs::from_read(ABI::V6))));
    }
    for device in &confinement.devices {
        if device.exists() {
            grants.push((device.clone(), AccessFs::ReadFile | AccessFs::WriteFile));
        }
    }
    // No grant may cover a hidden path unless it was asked for explicitly inside it.
    for (path, _) in &grants {
        let path = real(path);
        if let Some(hidden) = hidden.iter().find(|hidden| hidden.starts_with(&path) && **hidden != path) {
            return Err(io::Error::other(format!("{} would expose {}", path.display(), hidden.display())));
        }
    }
    Ok(grants)
}

/// The canonical path, or the path as given when it does not exist (yet).
fn real(path: &Path) -> PathBuf {
    path.canonicalize().unwrap_or_else(|_| path.to_path_buf())
}

/// The parts of `root` that can be granted without granting anything in `hidden`.
/// Symlinks inside an expanded directory are left out: granting one would grant its target.
pub fn expand(root: &Path, hidden: &[PathBuf]) -> io::Result<Vec<PathBuf>> {
    let Ok(root) = root.canonicalize() else { return Ok(Vec::new()) };
    if hidden.iter().any(|hidden| root.starts_with(hidden)) {
        return Ok(Vec::new());
    }
    if !hidden.iter().any(|hidden| hidden.starts_with(&root)) {
        return Ok(vec![root]);
    }
    let mut parts = Vec::new();
    for entry in std::fs::read_dir(&root)? {
        let path = entry?.path();
        let kind = std::fs::symlink_metadata(&path)?.file_type();
        if hidden.contains(&path) {
            continue;
        }
        if hidden.iter().any(|hidden| hidden.starts_with(&path)) {
            if kind.is_dir() {
                parts.extend(expand(&path, hidden)?);
            }
        } else if !kind.is_symlink() {
            parts.push(path);
        }
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::spec::Limits;

    fn confinement(writable: Vec<PathBuf>, readable: Vec<PathBuf>, hidden: Vec<PathBuf>) -> Confinement {
        Confinement {
            writable,
            readable,
            devices: Vec::new(),
            hidden,
            network: false,
            limits: Limits { cpu_seconds: 1, data_bytes: 1, processes: 1, file_bytes: 1, open_files: 1 },
            run_as: None,
        }
    }

    #[test]
    fn a_readable_directory_holding_a_hidden_path_is_split_around_it() {
        let root = tempfile::tempdir().unwrap();
        let root = root.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("etc/ferry")).unwrap();
        std::fs::write(root.join("etc/ferry/ferry.toml"), "secret").unwrap();
        std::fs::write(root.join("etc/ferry/other"), "x").unwrap();
        std::fs::write(root.join("etc/passwd"), "x").unwrap();
        std::os::unix::fs::symlink("/", root.join("etc/escape")).unwrap();

        let hidden = vec![root.join("etc/ferry/ferry.toml")];
        let mut parts = expand(&root.join("etc"), &hidden).unwrap();
        parts.sort();
        assert_eq!(parts, [root.join("etc/ferry/other"), root.join("etc/passwd")], "no symlink, no hidden file");
        assert_eq!(expand(&root.join("etc/ferry/ferry.toml"), &hidden).unwrap(), Vec::<PathBuf>::new());
        assert_eq!(expand(&root.join("nowhere"), &hidden).unwrap(), Vec::<PathBuf>::new());
    }

    #[test]
    fn a_workspace_inside_the_hidden_state_dir_is_still_granted() {
        let root = tempfile::tempdir().unwrap();
        let state = root.path().canonicalize().unwrap().join("state");
        let workspace = state.join("sandboxes/s1/work");
        std::fs::create_dir_all(&workspace).unwrap();
        std::fs::create_dir_all(state.join("sandboxes/s2/work")).unwrap();
        let grants =
            grants(&confinement(vec![workspace.clone()], vec![root.path().to_path_buf()], vec![state])).unwrap();
        let paths: Vec<&PathBuf> = grants.iter().map(|(path, _)| path).collect();
        assert_eq!(paths, [&workspace], "the other session's workspace and the state dir are not granted");
    }
}
