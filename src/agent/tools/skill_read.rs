//! `skill_read`: the full instructions of a skill listed in the system prompt.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use super::{ToolContext, ToolError, ToolOutput, TypedTool};
use crate::agent::skills::body;

/// A skill body longer than this is cut, so one huge file cannot fill the context.
const MAX_SKILL_CHARS: usize = 50_000;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SkillReadArgs {
    /// The skill's name, as listed in the system prompt.
    pub name: String,
}

pub struct SkillRead;

#[async_trait]
impl TypedTool for SkillRead {
    type Args = SkillReadArgs;
    const NAME: &'static str = "skill_read";
    const DESCRIPTION: &'static str = "Read the full instructions of one of the skills listed in the system prompt.";

    async fn run(&self, args: SkillReadArgs, context: &ToolContext) -> Result<ToolOutput, ToolError> {
        // Only listed skills: the name never becomes a path, so nothing else can be read.
        let skill = context.skills.get(&args.name).ok_or_else(|| {
            let names: Vec<_> = context.skills.skills().iter().map(|s| s.name.as_str()).collect();
            ToolError::new(format!("no skill named {:?}; available: {}", args.name, names.join(", ")))
        })?;
        let text = tokio::fs::read_to_string(&skill.path)
            .await
            .map_err(|error| ToolError::new(format!("cannot read skill {:?}: {error}", args.name)))?;
        let body = body(&text);
        let text = match body.char_indices().nth(MAX_SKILL_CHARS) {
            Some((cut, _)) => format!("{}\n[…skill truncated at {MAX_SKILL_CHARS} characters]", &body[..cut]),
            None => body.to_owned(),
        };
        Ok(text.into())
    }
}
