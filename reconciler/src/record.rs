//! What a pass has decided to publish: the status being built, the events, and the ended
//! actions the metrics count. Decisions write here, in memory; the controller publishes it
//! once the pass's writes are made (status first, then the events). Also the on-demand
//! requests: the token still to act on, and its acknowledgement in status.

use hellostateful_api::names;
use hellostateful_api::{HelloStateful, HelloStatefulStatus, RequestPhase, RequestStatus};
use kube::ResourceExt;
use kube::runtime::events::EventType;

use crate::conditions::{self, Conditions};
use crate::error::Error;
use crate::kept;

/// What status and events say of a write the API server refused.
pub fn refusal_message(error: &Error) -> String {
    format!(
        "the API server refused a child object: {}",
        error.user_message()
    )
}

/// An event to publish about the app.
#[derive(Clone, Debug, PartialEq)]
pub struct Note {
    pub kind: EventType,
    pub reason: &'static str,
    pub action: &'static str,
    pub message: String,
}

/// An ended action, for the metrics.
#[derive(Clone, Debug, PartialEq)]
pub enum Tally {
    BackupSucceeded { bytes: u64 },
    BackupFailed,
    RestoreSucceeded,
    RestoreFailed,
}

#[derive(Clone, Debug)]
pub struct Record {
    pub status: HelloStatefulStatus,
    pub notes: Vec<Note>,
    pub tallies: Vec<Tally>,
    /// The app's generation, which conditions set now say they observed.
    generation: Option<i64>,
}

impl Record {
    pub fn new(status: HelloStatefulStatus, generation: Option<i64>) -> Self {
        Self {
            status,
            notes: Vec::new(),
            tallies: Vec::new(),
            generation,
        }
    }

    pub fn note(
        &mut self,
        kind: EventType,
        reason: &'static str,
        action: &'static str,
        message: String,
    ) {
        self.notes.push(Note {
            kind,
            reason,
            action,
            message,
        });
    }

    pub fn conditions(&mut self) -> Conditions<'_> {
        Conditions::new(&mut self.status.conditions, self.generation)
    }

    /// Says in status and an event, in the API server's words, that it refused a write of
    /// this pass (`Error::is_refusal`).
    pub fn refused(&mut self, error: &Error) {
        let message = refusal_message(error);
        if self
            .conditions()
            .set(conditions::READY, false, "ChildRefused", &message)
        {
            self.note(EventType::Warning, "ChildRefused", "Apply", message);
        }
    }

    /// The restore token still to act on (see `pending_token`); one that came with an older
    /// app's YAML is acknowledged as ignored.
    pub fn restore_token<'a>(&mut self, app: &'a HelloStateful) -> Option<&'a str> {
        to_act_on(
            app,
            names::RESTORE_REQUESTED,
            &mut self.status.restore_request,
        )
    }

    /// The backup token still to act on, as `restore_token`.
    pub fn backup_token<'a>(&mut self, app: &'a HelloStateful) -> Option<&'a str> {
        to_act_on(
            app,
            names::BACKUP_REQUESTED,
            &mut self.status.backup_request,
        )
    }
}

/// The acknowledgement of an on-demand request (a `*-requested` token) in status.
pub fn request(
    token: &str,
    phase: RequestPhase,
    job: Option<&str>,
    message: impl Into<String>,
) -> RequestStatus {
    RequestStatus {
        token: token.to_string(),
        phase,
        job: job.map(str::to_string),
        backup_id: None,
        message: Some(message.into()),
    }
}

/// The token under `annotation` that still needs acting on. A token that is a time before
/// the app was created was not made for this app (it came with a copy of an older app's
/// YAML): it is never acted on, and `Err` holds its acknowledgement as Failed.
pub fn pending_token<'a>(
    app: &'a HelloStateful,
    annotation: &str,
    acknowledged: Option<&RequestStatus>,
) -> Result<Option<&'a str>, RequestStatus> {
    let Some(token) = app.annotations().get(annotation).map(String::as_str) else {
        return Ok(None);
    };
    let done = acknowledged.is_some_and(|ack| ack.token == token && ack.phase.is_final());
    if token.is_empty() || done {
        return Ok(None);
    }
    // What the cache keeps of a token too long to be one (`kept::keep_app`): refused, and
    // never copied into status whole.
    if let Some(length) = token.strip_prefix(kept::OVERSIZED) {
        return Err(request(
            token,
            RequestPhase::Failed,
            None,
            format!(
                "ignored: this request's token is {length}, more than {} bytes; request it again with a short token (the plugin uses the current time)",
                kept::LONGEST_KEPT_VALUE
            ),
        ));
    }
    let made = token.parse::<k8s_openapi::jiff::Timestamp>().ok();
    let created = app.metadata.creation_timestamp.as_ref().map(|t| t.0);
    match (made, created) {
        // Creation times have whole seconds: only a token from an earlier second is older.
        (Some(made), Some(created)) if made.as_second() < created.as_second() => Err(request(
            token,
            RequestPhase::Failed,
            None,
            format!(
                "ignored: this request ({token}) is older than the app (created {created}), so it came with a copy of an earlier app's YAML; request it again to act on this app"
            ),
        )),
        _ => Ok(Some(token)),
    }
}

/// `pending_token`, with an ignored token acknowledged in `ack`.
fn to_act_on<'a>(
    app: &'a HelloStateful,
    annotation: &str,
    ack: &mut Option<RequestStatus>,
) -> Option<&'a str> {
    pending_token(app, annotation, ack.as_ref()).unwrap_or_else(|ignored| {
        *ack = Some(ignored);
        None
    })
}
