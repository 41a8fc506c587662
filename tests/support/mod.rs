//! Reading what the `ferry` binary printed, shared by the CLI tests.

use std::process::Output;

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The single `error:` line a failing command prints (asserting there is exactly one).
pub fn error_line(output: &Output) -> String {
    assert!(!output.status.success(), "expected failure, got success: {}", stdout(output));
    let errors: Vec<_> = stderr(output).lines().filter(|line| line.starts_with("error:")).map(str::to_owned).collect();
    assert_eq!(errors.len(), 1, "expected exactly one error line in: {}", stderr(output));
    errors[0].clone()
}
