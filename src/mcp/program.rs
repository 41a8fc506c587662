//! Finding a local server's program the way starting it would, so `ferry config check` can
//! say a command is missing before the gateway tries it.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Where `command` is: a path (with a `/`, relative to `cwd` when given) or a name looked up
/// on `path` (the `PATH` the server is started with). The error says why not.
pub fn find_program(command: &str, cwd: Option<&Path>, path: Option<&str>) -> Result<PathBuf, String> {
    if command.contains('/') {
        let candidate = match cwd {
            Some(cwd) if Path::new(command).is_relative() => cwd.join(command),
            _ => PathBuf::from(command),
        };
        return if is_executable(&candidate) {
            Ok(candidate)
        } else {
            Err(format!("{} does not exist or is not executable", candidate.display()))
        };
    }
    let path = path.unwrap_or_default();
    std::env::split_paths(path)
        .map(|dir| dir.join(command))
        .find(|candidate| is_executable(candidate))
        .ok_or_else(|| format!("`{command}` is not on PATH ({path})"))
}

fn is_executable(path: &Path) -> bool {
    path.metadata().is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_found_on_path_or_by_path() {
        assert!(find_program("sh", None, Some("/nonexistent:/bin:/usr/bin")).is_ok());
        let missing = find_program("no-such-mcp-server", None, Some("/bin")).unwrap_err();
        assert!(missing.contains("not on PATH (/bin)"), "{missing}");
        assert!(find_program("/bin/sh", None, None).is_ok());
        assert!(find_program("./sh", Some(Path::new("/bin")), None).is_ok());
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("server.js");
        std::fs::write(&plain, "not a program").unwrap();
        std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
        let not_exec = find_program(plain.to_str().unwrap(), None, None).unwrap_err();
        assert!(not_exec.contains("not executable"), "{not_exec}");
    }
}
