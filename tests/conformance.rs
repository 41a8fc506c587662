//! The conformance suite (`tests/conformance/mod.rs`) for every adapter built into this
//! binary, each against its own fake.

#[path = "common/daemon.rs"]
mod daemon;

#[path = "conformance/mod.rs"]
mod conformance;

conformance_suite!(telegram, crate::conformance::telegram::Telegram);
conformance_suite!(discord, crate::conformance::discord::Discord);
conformance_suite!(slack, crate::conformance::slack::Slack);

/// The heartbeat targets a chat by id; on Telegram a DM's chat id is the user's.
#[tokio::test]
async fn telegram_heartbeat_costs_nothing_without_tasks_and_alerts_once() {
    conformance::scheduled::the_heartbeat_costs_nothing_without_tasks_and_alerts_once::<conformance::telegram::Telegram>()
        .await;
}

/// The silent memory flush before a compaction (one platform: it happens in the agent loop).
#[tokio::test]
async fn telegram_before_compaction_the_agent_saves_memories_silently() {
    conformance::memory::before_compaction_the_agent_saves_memories_silently::<conformance::telegram::Telegram>().await;
}

#[tokio::test]
async fn telegram_a_scheduled_run_compacts_without_a_memory_flush() {
    conformance::memory::a_scheduled_run_compacts_without_a_memory_flush::<conformance::telegram::Telegram>().await;
}

/// Hybrid memory search against a fake embeddings endpoint (one platform: the search is the
/// same behind every channel).
#[tokio::test]
async fn telegram_hybrid_memory_search_finds_a_paraphrase_and_survives_the_endpoint_going_down() {
    conformance::memory::hybrid_search_finds_a_paraphrase_and_keywords_answer_while_the_endpoint_is_down::<
        conformance::telegram::Telegram,
    >()
    .await;
}

/// The file mirror (one platform: the mirror is the same behind every channel, and on
/// Telegram the suite's user numbers are the user ids a scope is named by).
#[tokio::test]
async fn telegram_memory_mirror_writes_the_workspace_file_and_reads_a_hand_edit_back() {
    conformance::memory::a_mirrored_scope_reaches_the_workspace_and_a_hand_edit_comes_back::<
        conformance::telegram::Telegram,
    >()
    .await;
}
