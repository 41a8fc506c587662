//! Requests to approve a command (`[tools.exec] ask`) as gateway clients see them.
//!
//! A request reaches a web chat as a message like any other the agent sends (a `chat`
//! final of its own), so every client shows its text. What is here adds its structure, for
//! a client that offers Approve / Deny and shows how a request ended; the requests and
//! their states are the core's ([`crate::agent::tools::exec::approvals`]):
//!
//! - the `chat` final that carries a pending request names it ([`view`]);
//! - `chat.history` lists the requests the session keeps where they happened ([`history`]);
//! - an `approval` event tells of each change: answered, timed out, withdrawn ([`event`]).

use serde_json::{Value, json};

use crate::agent::ChatMessage;
use crate::agent::tools::exec::{Approval, ApprovalState};
use crate::media::FileInfo;
use crate::reply::media_lines;
use crate::session::TranscriptEntry;

/// `{id, command, state, by?, runId, requestedAt}`. `state` is `pending`, `approved`,
/// `denied`, `timedOut` (nobody answered in time, which denied it) or `withdrawn` (the run
/// that asked was stopped); `by`, who answered, comes with `approved` and `denied`.
pub fn view(approval: &Approval) -> Value {
    let (state, by) = match &approval.state {
        ApprovalState::Pending => ("pending", None),
        ApprovalState::Approved { by } => ("approved", Some(by)),
        ApprovalState::Denied { by } => ("denied", Some(by)),
        ApprovalState::TimedOut => ("timedOut", None),
        ApprovalState::Withdrawn => ("withdrawn", None),
    };
    let mut view = json!({
        "id": approval.id,
        "command": approval.command,
        "state": state,
        "runId": approval.run_id,
        "requestedAt": approval.requested_at,
    });
    if let Some(by) = by {
        view["by"] = json!(by);
    }
    view
}

/// An `approval` event's payload: the [`view`] and the session it belongs to.
pub fn event(approval: &Approval) -> Value {
    let mut payload = view(approval);
    payload["sessionKey"] = json!(approval.session_key);
    payload
}

/// What `chat.history` lists, oldest first: the user's and the assistant's messages of
/// `transcript`, and the session's `approvals` (oldest first), each as
/// `{role: "approval", text, approval: view}` right after the assistant message whose tool
/// call asked it (matched by run and call id, so ids a model reuses do not mislead).
///
/// A request whose call is not in the transcript belongs to a run still going (`running`:
/// runs save their messages when they end) and comes last; with no run going, only a
/// pending one does (a request of a run that was superseded, or whose messages were
/// compacted away, has no place left).
///
/// A user message's files come as `files` ([`FileInfo`]s; the caller marks those no longer
/// stored). An assistant message's `MEDIA:` lines are taken out of its text, as from the
/// live reply; the files they named are listed by name only, with `expired: true` (their
/// stored copies are not remembered), so the page shows a placeholder.
pub fn history(transcript: Vec<TranscriptEntry>, approvals: Vec<Approval>, running: bool) -> Vec<Value> {
    let mut unplaced = approvals;
    let mut messages = Vec::new();
    for TranscriptEntry { run_id, message } in transcript {
        match message {
            ChatMessage::User { text, media } => {
                let mut message = json!({ "role": "user", "text": text });
                if !media.is_empty() {
                    message["files"] = json!(media.iter().map(FileInfo::of_ref).collect::<Vec<_>>());
                }
                messages.push(message);
            }
            ChatMessage::Assistant { text, tool_calls, .. } => {
                let split = media_lines::split(&text);
                let shown = if split.media.is_empty() { text.as_str() } else { split.text.trim_end() };
                if !shown.trim().is_empty() || !split.media.is_empty() {
                    let mut message = json!({ "role": "assistant", "text": shown });
                    if !split.media.is_empty() {
                        let names = split.media.iter().map(|named| {
                            let name = named.rsplit(['/', '\\']).next().unwrap_or(named);
                            json!({ "name": name, "expired": true })
                        });
                        message["files"] = Value::Array(names.collect());
                    }
                    messages.push(message);
                }
                let Some(run_id) = run_id else { continue };
                for call in &tool_calls {
                    let asked = unplaced.iter().position(|a| a.run_id == run_id && a.call_id == call.id);
                    if let Some(at) = asked {
                        messages.push(entry(&unplaced.remove(at)));
                    }
                }
            }
            ChatMessage::ToolResult { .. } => {}
        }
    }
    messages.extend(unplaced.iter().filter(|approval| running || approval.state.is_pending()).map(entry));
    messages
}

fn entry(approval: &Approval) -> Value {
    json!({ "role": "approval", "text": approval.text, "approval": view(approval) })
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::*;
    use crate::agent::ToolCall;

    fn approval(run_id: &str, call_id: &str, state: ApprovalState) -> Approval {
        Approval {
            id: format!("{run_id}-{call_id}"),
            session_key: "agent:main:main".into(),
            run_id: run_id.into(),
            call_id: call_id.into(),
            command: "make".into(),
            text: "Approve make?".into(),
            message_key: format!("{run_id}:{call_id}:approval"),
            requested_at: Utc::now(),
            state,
        }
    }

    fn written(run_id: &str, message: ChatMessage) -> TranscriptEntry {
        TranscriptEntry { run_id: Some(run_id.into()), message }
    }

    fn asks(call_id: &str, text: &str) -> ChatMessage {
        ChatMessage::assistant(text, vec![ToolCall { id: call_id.into(), name: "exec".into(), arguments: "{}".into() }])
    }

    /// Each message's role and text, the approvals' ids as their text.
    fn shown(history: &[Value]) -> Vec<(String, String)> {
        let text = |m: &Value| if m["role"] == "approval" { m["approval"]["id"].clone() } else { m["text"].clone() };
        history.iter().map(|m| (m["role"].as_str().unwrap_or_default().to_owned(), text(m).to_string())).collect()
    }

    #[test]
    fn a_request_comes_right_after_the_message_that_asked_in_the_run_that_asked() {
        let approved = ApprovalState::Approved { by: "alice".into() };
        // The model gave both runs' calls the same id.
        let transcript = vec![
            written("r1", ChatMessage::user("check it")),
            written("r1", asks("call_0", "")),
            written("r1", ChatMessage::tool_result("call_0", "exec", "ok", false)),
            written("r1", ChatMessage::assistant("Checked.", vec![])),
            written("r2", ChatMessage::user("again")),
            written("r2", asks("call_0", "Once more:")),
            written("r2", ChatMessage::tool_result("call_0", "exec", "denied", true)),
            written("r2", ChatMessage::assistant("Not run.", vec![])),
        ];
        let approvals = vec![
            approval("r1", "call_0", approved),
            approval("r2", "call_0", ApprovalState::Denied { by: "bob".into() }),
        ];
        let history = history(transcript, approvals, false);
        let expected = [
            ("user", "\"check it\""),
            ("approval", "\"r1-call_0\""),
            ("assistant", "\"Checked.\""),
            ("user", "\"again\""),
            ("assistant", "\"Once more:\""),
            ("approval", "\"r2-call_0\""),
            ("assistant", "\"Not run.\""),
        ];
        let expected: Vec<(String, String)> = expected.iter().map(|(r, t)| ((*r).into(), (*t).into())).collect();
        assert_eq!(shown(&history), expected);
        assert_eq!(
            history[1]["approval"],
            json!({
                "id": "r1-call_0", "command": "make", "state": "approved", "by": "alice", "runId": "r1",
                "requestedAt": history[1]["approval"]["requestedAt"],
            })
        );
        assert_eq!(history[1]["text"], "Approve make?");
        assert_eq!(history[5]["approval"]["state"], "denied");
    }

    #[test]
    fn requests_of_a_run_not_saved_yet_come_last_and_settled_ones_without_a_place_are_left_out() {
        let transcript = vec![written("r1", ChatMessage::user("hi")), written("r1", asks("c1", "hello"))];
        let approvals = vec![
            approval("gone", "c1", ApprovalState::TimedOut),
            approval("r2", "c1", ApprovalState::Approved { by: "alice".into() }),
            approval("r2", "c2", ApprovalState::Pending),
        ];
        let running: Vec<String> = history(transcript.clone(), approvals.clone(), true)
            .iter()
            .map(|m| m["approval"]["id"].to_string())
            .collect();
        assert_eq!(running[2..], ["\"gone-c1\"", "\"r2-c1\"", "\"r2-c2\""], "while a run goes, after everything saved");
        let idle = history(transcript, approvals, false);
        assert_eq!(idle.len(), 3, "{idle:?}");
        assert_eq!(
            (idle[2]["approval"]["id"].as_str(), idle[2]["approval"]["state"].as_str()),
            (Some("r2-c2"), Some("pending"))
        );
    }

    #[test]
    fn every_state_has_its_name_and_an_event_names_the_session() {
        let states = [
            (ApprovalState::Pending, "pending"),
            (ApprovalState::Approved { by: "a".into() }, "approved"),
            (ApprovalState::Denied { by: "b".into() }, "denied"),
            (ApprovalState::TimedOut, "timedOut"),
            (ApprovalState::Withdrawn, "withdrawn"),
        ];
        for (state, name) in states {
            let answered = matches!(state, ApprovalState::Approved { .. } | ApprovalState::Denied { .. });
            let view = view(&approval("r", "c", state));
            assert_eq!((view["state"].as_str(), view.get("by").is_some()), (Some(name), answered));
        }
        assert_eq!(event(&approval("r", "c", ApprovalState::Pending))["sessionKey"], "agent:main:main");
    }
}
