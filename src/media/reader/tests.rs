//! The reader's judgement of how a child ended, the cut of its text and the capped pipe
//! reads; the child itself runs in `tests/media/reader.rs`, where the `ferry` binary exists.

use std::os::unix::process::ExitStatusExt;

use super::*;

fn exited(code: i32) -> ExitStatus {
    ExitStatus::from_raw(code << 8)
}

fn signalled(signal: i32) -> ExitStatus {
    ExitStatus::from_raw(signal)
}

fn answer(answer: &Answer) -> Vec<u8> {
    serde_json::to_vec(answer).unwrap()
}

#[test]
fn a_clean_exit_with_an_answer_is_that_answer() {
    let text = answer(&Answer::Text { text: "hello".into(), more_chars: 2 });
    let judged = judge(exited(0), &text, "", true);
    assert!(matches!(judged, Ok(Answer::Text { ref text, more_chars: 2 }) if text == "hello"));
    let failed = answer(&Answer::Failed(PdfError::Encrypted));
    assert!(matches!(judge(exited(0), &failed, "", false), Ok(Answer::Failed(PdfError::Encrypted))));
}

#[test]
fn an_allocation_failure_is_out_of_memory_however_the_child_ended() {
    let stderr = "memory allocation of 1073741824 bytes failed";
    // Unconfined, the abort ends the child; confined, the launcher reports it as an exit code.
    assert!(matches!(judge(signalled(libc::SIGABRT), b"", stderr, false), Err(Ended::OutOfMemory)));
    assert!(matches!(judge(exited(128 + libc::SIGABRT), b"", stderr, true), Err(Ended::OutOfMemory)));
}

#[test]
fn the_cpu_limit_is_too_slow() {
    assert!(matches!(judge(signalled(libc::SIGXCPU), b"", "", false), Err(Ended::TooSlow)));
    assert!(matches!(judge(exited(128 + libc::SIGKILL), b"", "", true), Err(Ended::TooSlow)));
}

#[test]
fn a_launcher_that_could_not_confine_is_a_setup_failure_only_when_confinement_was_asked() {
    let stderr = "sandbox: cannot create the namespaces: EPERM; the command did not run";
    assert!(
        matches!(judge(exited(SETUP_FAILED), b"", stderr, true), Err(Ended::SetupFailed(ref why)) if why == stderr)
    );
    assert!(matches!(judge(exited(SETUP_FAILED), b"", stderr, false), Err(Ended::Other(_))));
    // Anything written on stdout means the parser ran: never taken for a setup failure.
    assert!(matches!(judge(exited(SETUP_FAILED), b"{", stderr, true), Err(Ended::Other(_))));
}

#[test]
fn a_crash_or_garbage_is_another_ending_with_the_last_words() {
    let judged = judge(exited(128 + libc::SIGSEGV), b"", "one\nthread 'main' has overflowed its stack", true);
    assert!(matches!(judged, Err(Ended::Other(ref why)) if why.ends_with("has overflowed its stack")));
    assert!(matches!(judge(exited(0), b"not json", "", true), Err(Ended::Other(_))));
}

#[test]
fn the_text_is_cut_after_the_characters_asked_for() {
    assert!(matches!(cut("héllo".into(), 2), Answer::Text { ref text, more_chars: 3 } if text == "hé"));
    assert!(matches!(cut("héllo".into(), 5), Answer::Text { ref text, more_chars: 0 } if text == "héllo"));
    assert!(matches!(cut("héllo".into(), 0), Answer::Text { ref text, more_chars: 5 } if text.is_empty()));
}

#[tokio::test]
async fn a_capped_read_keeps_the_start_and_drains_the_rest() {
    let bytes = vec![7u8; 200_000];
    let (kept, over) = read_capped(&bytes[..], 1000).await;
    assert_eq!((kept.len(), over), (1000, true));
    let (kept, over) = read_capped(&bytes[..10], 1000).await;
    assert_eq!((kept.len(), over), (10, false));
}
