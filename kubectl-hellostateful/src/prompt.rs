//! Prompts, only ever on a terminal (callers check `Terminal::can_prompt` first).

use dialoguer::{Confirm, Input};

use crate::error::CliError;

/// Asks a yes/no question on stderr; the default is no.
pub fn confirm(question: &str) -> Result<bool, CliError> {
    Confirm::new()
        .with_prompt(question)
        .default(false)
        .interact()
        .map_err(|e| CliError::Failed(format!("cannot ask for confirmation: {e}")))
}

/// Asks for a line of text, checking it with `validate`; empty answers are allowed.
pub fn input(
    question: &str,
    validate: impl Fn(&str) -> Result<(), String>,
) -> Result<String, CliError> {
    Input::<String>::new()
        .with_prompt(question)
        .allow_empty(true)
        .validate_with(move |text: &String| -> Result<(), String> {
            if text.trim().is_empty() {
                Ok(())
            } else {
                validate(text.trim())
            }
        })
        .interact_text()
        .map(|text| text.trim().to_string())
        .map_err(|e| CliError::Failed(format!("cannot read the answer: {e}")))
}
