//! Shell commands asked for in a group chat (issue 21): the group is a sandboxed session
//! (`tools.sandbox.mode = "non-main"`, the default), so every command here runs through the
//! real sandbox launcher. A command that needs approval is shown to the chat with an id and
//! runs only once a member answers `/approve ID`; `/deny ID` keeps it from running. A command
//! left in the background survives `/stop` and is killed by `/reset`.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ferry_fakes::{Reply, ToolCall, Turn};

use super::{GROUP, Harness, Platform, last_tool_result};
use crate::daemon::PATIENCE;

/// The coding profile, every command asked for first.
const ASK_ALWAYS: &str = "[tools]\nprofile = \"coding\"\n\n[tools.exec]\nask = \"always\"";
/// The coding profile, no command asked for.
const ASK_OFF: &str = "[tools]\nprofile = \"coding\"\n\n[tools.exec]\nask = \"off\"";

/// The group members who talk to the bot.
const ALICE: u64 = 7;
const BOB: u64 = 8;

impl<P: Platform> Harness<P> {
    /// The gateway's state directory (`$HOME/.local/share/ferry`).
    fn state_dir(&self) -> PathBuf {
        let home = self.daemon.as_ref().and_then(|daemon| daemon.home.as_ref()).expect("a running gateway");
        home.path().join(".local/share/ferry")
    }
}

/// The id an approval request asks to be answered with: the word after `/approve `.
fn approval_id(text: &str) -> String {
    let (_, after) = text.split_once("/approve ").unwrap_or_else(|| panic!("no `/approve ID` in {text:?}"));
    let id: String = after.chars().take_while(char::is_ascii_alphanumeric).collect();
    assert!(!id.is_empty(), "an empty approval id in {text:?}");
    assert!(text.contains(&format!("/deny {id}")), "the request also says how to deny it: {text:?}");
    id
}

/// An `exec` call with these arguments (a JSON object).
fn exec(arguments: &str) -> Turn {
    Turn::tool_calls([ToolCall::new("call_exec", "exec", arguments)])
}

/// A command the model asks for in a group is shown to the chat with an id; once a member
/// answers `/approve ID` it runs (in the sandbox), and the model gets its output and exit code.
pub async fn a_command_asked_for_in_a_group_runs_once_a_member_approves_it<P: Platform>() {
    let h = Harness::<P>::start(ASK_ALWAYS).await;
    let command = "echo approved-$((6*7))";
    h.openai.push(exec(&serde_json::json!({ "command": command }).to_string()));
    h.openai.push(Turn::text(["It printed approved-42."]));
    h.platform.group(GROUP, ALICE, "please run the check", true).await;

    let asked = h.group_message_containing("/approve ").await;
    assert!(asked.visible.contains(command), "{}: the exact command is shown: {:?}", P::NAME, asked.visible);
    let id = approval_id(&asked.visible);
    assert_eq!(h.openai.requests().len(), 1, "{}: the run waits for the answer", P::NAME);

    h.platform.group(GROUP, BOB, &format!("/approve {id}"), true).await;
    let result = last_tool_result(&h.request(1).await);
    assert!(result.contains("approved-42"), "{}: the command ran and its output came back: {result}", P::NAME);
    assert!(result.contains("exit code 0"), "{}: its exit code is reported: {result}", P::NAME);
    h.group_message_containing("Approved").await;
    h.group_message_containing("It printed approved-42.").await;
}

/// `/deny ID` keeps the command from running: the model is told it was denied, and the
/// workspace it would have run in stays as it was.
pub async fn a_command_a_member_denies_does_not_run_and_the_model_is_told<P: Platform>() {
    let h = Harness::<P>::start(ASK_ALWAYS).await;
    let command = "touch denied-command-ran && echo the-command-ran";
    h.openai.push(exec(&serde_json::json!({ "command": command }).to_string()));
    h.openai.push(Turn::text(["Understood, I will not run it."]));
    h.platform.group(GROUP, ALICE, "please clean up", true).await;

    let asked = h.group_message_containing("/approve ").await;
    assert!(asked.visible.contains(command), "{}: the exact command is shown: {:?}", P::NAME, asked.visible);
    let id = approval_id(&asked.visible);
    h.platform.group(GROUP, BOB, &format!("/deny {id}"), true).await;

    let result = last_tool_result(&h.request(1).await);
    assert!(result.contains("denied the command") && result.contains("did not run"), "{}: {result}", P::NAME);
    assert!(!result.contains("the-command-ran"), "{}: no output of the command: {result}", P::NAME);
    h.group_message_containing("Denied").await;
    h.group_message_containing("Understood, I will not run it.").await;
    // The group's workspace was made before asking; the command would have touched a file in it.
    let workspaces = workspaces(&h.state_dir());
    assert_eq!(workspaces.len(), 1, "{}: one session's workspace: {workspaces:?}", P::NAME);
    let left: Vec<_> =
        std::fs::read_dir(&workspaces[0]).unwrap().filter_map(Result::ok).map(|e| e.file_name()).collect();
    assert!(left.is_empty(), "{}: the denied command left {left:?} in its workspace", P::NAME);
}

/// Every session's workspace under `state_dir` (`sandboxes/<session>/work`).
fn workspaces(state_dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(state_dir.join("sandboxes")) else { return Vec::new() };
    entries.filter_map(Result::ok).map(|entry| entry.path().join("work")).filter(|work| work.is_dir()).collect()
}

/// A command left in the background (`yield_ms`) keeps running through `/stop`, which only
/// aborts the run, and the model can still poll it afterwards; `/reset` kills it.
pub async fn stop_leaves_a_background_command_running_and_reset_kills_it<P: Platform>() {
    let h = Harness::<P>::start(ASK_OFF).await;
    // A duration nothing else on the machine sleeps for: it names the processes in /proc.
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().subsec_nanos();
    let marker = format!("300.{}{:09}", std::process::id(), nanos);
    let command = format!("sleep {marker}; echo never");
    h.openai.push(exec(&serde_json::json!({ "command": command, "yield_ms": 200 }).to_string()));
    // The run is still talking to the model when /stop comes.
    h.openai.push(Turn::stall(Reply::text(["Still ", "waiting for it"]), 1));
    h.platform.group(GROUP, ALICE, "start the long job", true).await;

    let started = last_tool_result(&h.request(1).await);
    assert!(started.contains("still running in the background"), "{}: {started}", P::NAME);
    let id = process_id(&started);
    assert!(!processes_with(&marker).is_empty(), "{}: the command runs in the background", P::NAME);

    h.platform.group(GROUP, ALICE, "/stop", true).await;
    h.group_message_containing("Stopped").await;
    // The model polls it in the next run: the command is still there.
    h.openai.push(Turn::tool_calls([ToolCall::new(
        "call_poll",
        "process",
        serde_json::json!({ "action": "poll", "id": id }).to_string(),
    )]));
    h.openai.push(Turn::text(["It is still going."]));
    h.platform.group(GROUP, ALICE, "how is the job going?", true).await;
    let polled = last_tool_result(&h.request(3).await);
    assert!(polled.contains(&format!("[{id} is still running]")), "{}: /stop left it running: {polled}", P::NAME);
    assert!(!processes_with(&marker).is_empty(), "{}: /stop left it running", P::NAME);
    h.group_message_containing("It is still going.").await;

    h.platform.group(GROUP, ALICE, "/reset", true).await;
    h.group_message_containing("new conversation").await;
    let gone = tokio::time::timeout(PATIENCE, async {
        while !processes_with(&marker).is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(gone.is_ok(), "{}: /reset did not kill {:?}", P::NAME, processes_with(&marker));
}

/// The process id in `exec`'s answer for a command left in the background (``process `p1` ``).
fn process_id(result: &str) -> String {
    let (_, after) = result.split_once("process `").unwrap_or_else(|| panic!("no process id in {result:?}"));
    after.split('`').next().unwrap_or_default().to_owned()
}

/// The live processes whose command line contains `marker`. A sandboxed command is in a PID
/// namespace of its own, but the host's `/proc` still lists it (and a zombie's command line
/// is empty, so only live ones count).
fn processes_with(marker: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            cmdline.windows(marker.len()).any(|window| window == marker.as_bytes())
        })
        .collect()
}
