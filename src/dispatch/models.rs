//! `/model`, `/think` and `/reasoning`: a session's own model, thinking level and reasoning
//! display (issue 20), kept with its other settings.

use super::Dispatcher;
use crate::control::{ModelCommand, SettingCommand};
use crate::models::{Candidate, ModelRouter, ReasoningDisplay, ThinkingLevel};
use crate::session::SessionOverrides;

/// Said when a setting could not be saved.
const NOT_SAVED: &str = "⚠️ I could not change that setting just now. Please try again.";

impl Dispatcher {
    pub(super) async fn model_command(&self, command: ModelCommand, session_key: &str) -> String {
        let current = self.inner.overrides.get(self.inner.store.as_ref(), session_key).await;
        let catalog = self.runner_for(session_key).router().catalog();
        let model = match command {
            ModelCommand::Show => return self.list_models(session_key, &current),
            ModelCommand::Reset => None,
            ModelCommand::Set(wanted) => match catalog.find_allowed(&wanted) {
                Some(candidate) => Some(candidate.label()),
                None => {
                    return format!(
                        "⚠️ {wanted:?} is not a model you can choose.\n{}",
                        self.choices(session_key, &current)
                    );
                }
            },
        };
        let overrides = SessionOverrides { model: model.clone(), ..current };
        if !self.save_overrides(session_key, overrides).await {
            return NOT_SAVED.to_owned();
        }
        match model {
            Some(model) => format!(
                "🧠 This conversation now uses {model}. If it is unavailable you will be told; \
                 /model default goes back to the default models."
            ),
            None => format!("🧠 Back to the default models: {}.", chain(&catalog.chain)),
        }
    }

    pub(super) async fn think_command(&self, command: SettingCommand<ThinkingLevel>, session_key: &str) -> String {
        let current = self.inner.overrides.get(self.inner.store.as_ref(), session_key).await;
        let default = self.runner_for(session_key).settings().thinking;
        let thinking = match command {
            SettingCommand::Show => {
                return format!(
                    "Thinking: {}.{} Usage: /think off|minimal|low|medium|high, or /think default ({default}).",
                    current.thinking.unwrap_or(default),
                    self.cannot_think_note(session_key, &current),
                );
            }
            SettingCommand::Invalid(problem) => {
                return format!("{problem}. Usage: /think off|minimal|low|medium|high, or /think default.");
            }
            SettingCommand::Reset => None,
            SettingCommand::Set(level) => Some(level),
        };
        let overrides = SessionOverrides { thinking, ..current.clone() };
        if !self.save_overrides(session_key, overrides).await {
            return NOT_SAVED.to_owned();
        }
        let level = thinking.unwrap_or(default);
        format!("💡 Thinking: {level}.{}", self.cannot_think_note(session_key, &current))
    }

    pub(super) async fn reasoning_command(
        &self,
        command: SettingCommand<ReasoningDisplay>,
        session_key: &str,
    ) -> String {
        let current = self.inner.overrides.get(self.inner.store.as_ref(), session_key).await;
        let display = match command {
            SettingCommand::Show => return describe_reasoning(current.reasoning.unwrap_or_default()).to_owned(),
            SettingCommand::Invalid(problem) => return format!("{problem}. Usage: /reasoning off|on|stream."),
            SettingCommand::Reset => ReasoningDisplay::Off,
            SettingCommand::Set(display) => display,
        };
        // Off is the default: no override rather than an explicit off.
        let overrides = SessionOverrides { reasoning: (!display.is_off()).then_some(display), ..current };
        if !self.save_overrides(session_key, overrides).await {
            return NOT_SAVED.to_owned();
        }
        describe_reasoning(display).to_owned()
    }

    fn chosen_model(&self, session_key: &str, overrides: &SessionOverrides) -> Option<Candidate> {
        chosen_model(self.runner_for(session_key).router(), overrides)
    }

    /// `/status`'s model lines: what answers this session, and what answered it last.
    pub(super) fn describe_models(&self, session_key: &str, overrides: &SessionOverrides) -> String {
        let router = self.runner_for(session_key).router();
        let mut lines = match self.chosen_model(session_key, overrides) {
            Some(chosen) => format!("Model: {} (chosen with /model)", chosen.label()),
            None => format!("Model: {}", chain(&router.catalog().chain)),
        };
        if let Some(used) = router.last_answered(session_key) {
            lines.push_str(&format!("\nAnswered by: {}", used.describe()));
        }
        let thinking = overrides.thinking.unwrap_or(self.runner_for(session_key).settings().thinking);
        let reasoning = overrides.reasoning.unwrap_or_default();
        lines.push_str(&format!("\nThinking: {thinking} · Reasoning: {reasoning}"));
        lines
    }

    fn list_models(&self, session_key: &str, overrides: &SessionOverrides) -> String {
        let current = match self.chosen_model(session_key, overrides) {
            Some(chosen) => format!("Current: {} (chosen with /model).", chosen.label()),
            None => format!("Current: the default, {}.", chain(&self.runner_for(session_key).router().catalog().chain)),
        };
        format!("{current}\n{}", self.choices(session_key, overrides))
    }

    fn choices(&self, session_key: &str, overrides: &SessionOverrides) -> String {
        let allowed = &self.runner_for(session_key).router().catalog().allowed;
        let chosen = self.chosen_model(session_key, overrides).map(|candidate| candidate.label());
        let lines: Vec<String> = allowed
            .iter()
            .enumerate()
            .map(|(index, candidate)| {
                let label = candidate.label();
                let mark = if chosen.as_deref() == Some(label.as_str()) { " ✓" } else { "" };
                format!("{}. {label}{mark}", index + 1)
            })
            .collect();
        format!("Models you can choose:\n{}\nUse /model <name or number>, or /model default.", lines.join("\n"))
    }

    /// A note when the model this session uses has no thinking knob.
    fn cannot_think_note(&self, session_key: &str, overrides: &SessionOverrides) -> String {
        let router = self.runner_for(session_key).router();
        let candidate = self.chosen_model(session_key, overrides).or_else(|| router.catalog().chain.first().cloned());
        match candidate {
            Some(candidate) if !candidate.provider.can_think() || router.cannot_think(&candidate.label()) => {
                format!(" {} cannot think, so it answers without thinking.", candidate.label())
            }
            _ => String::new(),
        }
    }
}

/// The session's chosen model, if it is still allowed (the config may have changed since).
pub(super) fn chosen_model(router: &ModelRouter, overrides: &SessionOverrides) -> Option<Candidate> {
    let chosen = overrides.model.as_deref()?;
    router.catalog().allowed.iter().find(|candidate| candidate.is(chosen)).cloned()
}

/// The default chain, `a/x (then b/y, c/z)`.
fn chain(chain: &[Candidate]) -> String {
    let labels: Vec<String> = chain.iter().map(Candidate::label).collect();
    match labels.split_first() {
        Some((first, [])) => first.clone(),
        Some((first, rest)) => format!("{first} (then {})", rest.join(", ")),
        None => "none".to_owned(),
    }
}

fn describe_reasoning(display: ReasoningDisplay) -> &'static str {
    match display {
        ReasoningDisplay::Off => {
            "Reasoning is hidden. /reasoning on shows it before each answer; /reasoning stream streams it."
        }
        ReasoningDisplay::On => "💭 Reasoning is shown before each answer, apart from it. /reasoning off hides it.",
        ReasoningDisplay::Stream => {
            "💭 Reasoning streams while I think, then the answer replaces it. /reasoning off hides it."
        }
    }
}
