//! Errors a user meets, each with a message that says what to do.

use kube::core::Status;
use thiserror::Error;

/// Everything that ends a command with a non-zero exit.
#[derive(Debug, Error)]
pub enum CliError {
    #[error(
        "the HelloStateful CRD is not installed in this cluster: run `kubectl hellostateful install`"
    )]
    CrdMissing,
    #[error("hellostateful {name:?} not found in namespace {namespace:?}{}", existing_hint(.existing))]
    NotFound {
        namespace: String,
        name: String,
        existing: Vec<String>,
    },
    #[error(
        "hellostateful {name:?} already exists in namespace {namespace:?}: see it with `kubectl hellostateful get {name} -n {namespace}`"
    )]
    AlreadyExists { namespace: String, name: String },
    #[error("forbidden: cannot {verb} {resource}: {message}")]
    Forbidden {
        verb: String,
        resource: String,
        message: String,
    },
    #[error("the API server refused the {resource}: {message}")]
    Invalid { resource: String, message: String },
    #[error("cannot {verb} {resource}: {message}")]
    Api {
        verb: String,
        resource: String,
        message: String,
    },
    #[error("{0}")]
    Config(String),
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Failed(String),
    /// A command that prints part of its answer and still fails (`version` without a
    /// cluster, as `kubectl version` does).
    #[error("{error}")]
    AfterOutput {
        output: String,
        error: Box<CliError>,
    },
    #[error("cannot {verb} {resource}: {}", explain_briefly(.source))]
    Kube {
        verb: String,
        resource: String,
        #[source]
        source: kube::Error,
    },
}

fn existing_hint(existing: &[String]) -> String {
    if existing.is_empty() {
        " (there are no HelloStateful apps in it; list every namespace with `kubectl hellostateful list -A`)".to_string()
    } else {
        format!("; apps in it: {}", existing.join(", "))
    }
}

/// What was being done when the API answered with an error.
#[derive(Debug, Clone)]
pub struct Action<'a> {
    /// Like "get", "patch", "create".
    pub verb: &'a str,
    /// Like `hellostateful "hello" in namespace "default"`.
    pub resource: String,
    /// Set when the object is a HelloStateful: a 404 then means "no such app" or "no CRD".
    pub app: Option<(&'a str, &'a str)>,
}

impl<'a> Action<'a> {
    /// An action on any resource.
    pub fn new(verb: &'a str, resource: impl Into<String>) -> Self {
        Action {
            verb,
            resource: resource.into(),
            app: None,
        }
    }

    /// An action on the HelloStateful `namespace/name`.
    pub fn app(verb: &'a str, namespace: &'a str, name: &'a str) -> Self {
        Action {
            verb,
            resource: format!("hellostateful {name:?} in namespace {namespace:?}"),
            app: Some((namespace, name)),
        }
    }

    /// An action on the HelloStateful collection (a 404 means the CRD is missing).
    pub fn apps(verb: &'a str, scope: impl Into<String>) -> Self {
        Action {
            verb,
            resource: scope.into(),
            app: Some(("", "")),
        }
    }
}

/// True when a 404 is about the resource type rather than one object: the API server answers
/// "the server could not find the requested resource" with no object name.
pub fn is_missing_type(status: &Status) -> bool {
    status.code == 404
        && status
            .details
            .as_ref()
            .is_none_or(|details| details.name.is_empty())
}

/// An error in one line: the API server's own message, or the transport error down to
/// its cause ("Connection refused"), which kube's own message leaves out.
pub fn explain_briefly(error: &kube::Error) -> String {
    if let kube::Error::Api(status) = error
        && !status.message.is_empty()
    {
        return status.message.clone();
    }
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text = format!("{text}: {cause_text}");
        }
        source = cause.source();
    }
    text
}

/// Turns an API error into what the user should read.
pub fn explain(error: kube::Error, action: &Action<'_>) -> CliError {
    let kube::Error::Api(status) = error else {
        return CliError::Kube {
            verb: action.verb.to_string(),
            resource: action.resource.clone(),
            source: error,
        };
    };
    let message = if status.message.is_empty() {
        status.reason.clone()
    } else {
        status.message.clone()
    };
    match status.code {
        404 if action.app.is_some() && is_missing_type(&status) => CliError::CrdMissing,
        404 if action.app.is_some() => {
            let (namespace, name) = action.app.unwrap_or_default();
            CliError::NotFound {
                namespace: namespace.to_string(),
                name: name.to_string(),
                existing: Vec::new(),
            }
        }
        409 if status.reason == "AlreadyExists" && action.app.is_some() => {
            let (namespace, name) = action.app.unwrap_or_default();
            CliError::AlreadyExists {
                namespace: namespace.to_string(),
                name: name.to_string(),
            }
        }
        403 => CliError::Forbidden {
            verb: action.verb.to_string(),
            resource: action.resource.clone(),
            message,
        },
        422 | 400 => CliError::Invalid {
            resource: action.resource.clone(),
            message: invalid_message(&status, message),
        },
        _ => CliError::Api {
            verb: action.verb.to_string(),
            resource: action.resource.clone(),
            message,
        },
    }
}

/// The API's message, plus each field cause it gives that the message does not repeat.
fn invalid_message(status: &Status, message: String) -> String {
    let mut text = message;
    if let Some(details) = &status.details {
        for cause in &details.causes {
            if !cause.message.is_empty() && !text.contains(&cause.message) {
                text.push_str(&format!("\n  {}: {}", cause.field, cause.message));
            }
        }
    }
    text
}

/// The API status code of an error, if it came from the API.
pub fn code(error: &kube::Error) -> Option<u16> {
    match error {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::response::StatusDetails;

    fn api_error(code: u16, reason: &str, message: &str, name: &str) -> kube::Error {
        let mut status = Status::failure(message, reason).with_code(code);
        if !name.is_empty() {
            status = status.with_details(StatusDetails {
                name: name.to_string(),
                group: "hello-stateful.example.com".to_string(),
                kind: "hellostatefuls".to_string(),
                uid: String::new(),
                causes: Vec::new(),
                retry_after_seconds: 0,
            });
        }
        kube::Error::Api(status.boxed())
    }

    #[test]
    fn a_404_without_a_name_means_the_crd_is_missing() {
        let error = api_error(
            404,
            "NotFound",
            "the server could not find the requested resource",
            "",
        );
        let explained = explain(error, &Action::app("get", "default", "hello"));
        assert_eq!(
            explained.to_string(),
            "the HelloStateful CRD is not installed in this cluster: run `kubectl hellostateful install`"
        );
    }

    #[test]
    fn a_404_with_a_name_means_no_such_app() {
        let error = api_error(
            404,
            "NotFound",
            "hellostatefuls.hello-stateful.example.com \"hello\" not found",
            "hello",
        );
        let explained = explain(error, &Action::app("get", "default", "hello"));
        assert_eq!(
            explained.to_string(),
            "hellostateful \"hello\" not found in namespace \"default\" (there are no HelloStateful apps in it; list every namespace with `kubectl hellostateful list -A`)"
        );
        let with_others = CliError::NotFound {
            namespace: "default".into(),
            name: "hello".into(),
            existing: vec!["web".into(), "db".into()],
        };
        assert_eq!(
            with_others.to_string(),
            "hellostateful \"hello\" not found in namespace \"default\"; apps in it: web, db"
        );
    }

    #[test]
    fn a_403_names_the_verb_and_resource() {
        let message = "hellostatefuls.hello-stateful.example.com \"hello\" is forbidden: User \"bob\" cannot patch resource \"hellostatefuls\" in API group \"hello-stateful.example.com\" in the namespace \"default\"";
        let error = api_error(403, "Forbidden", message, "hello");
        let explained = explain(error, &Action::app("patch", "default", "hello"));
        assert_eq!(
            explained.to_string(),
            format!(
                "forbidden: cannot patch hellostateful \"hello\" in namespace \"default\": {message}"
            )
        );
    }

    #[test]
    fn an_invalid_spec_shows_the_api_message() {
        let message = "HelloStateful.hello-stateful.example.com \"hello\" is invalid: spec.backupSchedule: Invalid value: \"string\": backupSchedule must be a cron schedule with five fields";
        let error = api_error(422, "Invalid", message, "hello");
        let explained = explain(error, &Action::app("create", "default", "hello"));
        assert_eq!(
            explained.to_string(),
            format!(
                "the API server refused the hellostateful \"hello\" in namespace \"default\": {message}"
            )
        );
    }

    #[test]
    fn a_409_on_create_suggests_get() {
        let error = api_error(409, "AlreadyExists", "already exists", "hello");
        let explained = explain(error, &Action::app("create", "default", "hello"));
        assert!(
            explained
                .to_string()
                .contains("already exists in namespace \"default\": see it with `kubectl hellostateful get hello -n default`"),
            "{explained}"
        );
    }

    #[test]
    fn other_resources_404_are_plain() {
        let error = api_error(404, "NotFound", "pods \"x\" not found", "x");
        let explained = explain(error, &Action::new("get", "pod \"x\""));
        assert_eq!(
            explained.to_string(),
            "cannot get pod \"x\": pods \"x\" not found"
        );
    }
}
