//! Kubeconfig and client setup, terminal facts, and the reconciler's whereabouts.

use std::io::IsTerminal;

use hellostateful_api::HelloStateful;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::ListParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

use crate::cli::{GlobalArgs, OutputFormat};
use crate::error::{Action, CliError, explain, explain_briefly};
use crate::output::{Style, printable_lines};

/// Namespace of the reconciler.
pub const SYSTEM_NAMESPACE: &str = "hellostateful-system";
/// Deployment (and ServiceAccount) of the reconciler.
pub const RECONCILER: &str = "hellostateful-reconciler";
/// Field manager of the plugin's server-side applies.
pub const FIELD_MANAGER: &str = "kubectl-hellostateful";

/// What the terminal is.
#[derive(Clone, Copy, Debug)]
pub struct Terminal {
    /// stdin is a terminal: prompts are allowed.
    pub stdin: bool,
    /// stdout is a terminal: colours, spinners, waiting by default.
    pub stdout: bool,
    /// stderr is a terminal: where prompts and spinners draw.
    pub stderr: bool,
}

impl Terminal {
    /// The process's terminal.
    pub fn detect() -> Self {
        Terminal {
            stdin: std::io::stdin().is_terminal(),
            stdout: std::io::stdout().is_terminal(),
            stderr: std::io::stderr().is_terminal(),
        }
    }

    /// Prompts need a terminal to read from and one to draw on.
    pub fn can_prompt(&self) -> bool {
        self.stdin && self.stderr
    }
}

/// Whether to colour: never with --no-color, NO_COLOR set (non-empty), or stdout not a terminal.
pub fn color_enabled(no_color_flag: bool, no_color_env: Option<&str>, stdout_tty: bool) -> bool {
    !no_color_flag && no_color_env.is_none_or(str::is_empty) && stdout_tty
}

/// What every command gets: the global flags and the terminal.
#[derive(Clone, Debug)]
pub struct Ctx {
    pub global: GlobalArgs,
    pub terminal: Terminal,
    pub style: Style,
}

impl Ctx {
    pub fn new(global: GlobalArgs) -> Self {
        let terminal = Terminal::detect();
        let no_color = std::env::var("NO_COLOR").ok();
        let style = Style {
            color: color_enabled(global.no_color, no_color.as_deref(), terminal.stdout),
        };
        Ctx {
            global,
            terminal,
            style,
        }
    }

    /// `-o`, defaulting to a table.
    pub fn output(&self) -> OutputFormat {
        self.global.output.unwrap_or(OutputFormat::Table)
    }

    /// Prints to stderr when -v was given at least `level` times (printable: messages carry
    /// names and errors read from the cluster).
    pub fn debug(&self, level: u8, message: impl AsRef<str>) {
        if self.global.verbose >= level {
            eprintln!("{}", self.style.dim(printable_lines(message.as_ref())));
        }
    }

    /// Reads the kubeconfig (--kubeconfig, else $KUBECONFIG merged, else ~/.kube/config; in a
    /// pod without one, the in-cluster config) and connects.
    pub async fn connect(&self) -> Result<Kube, CliError> {
        let options = KubeConfigOptions {
            context: self.global.context.clone(),
            cluster: self.global.cluster.clone(),
            user: self.global.user.clone(),
        };
        let mut config = match &self.global.kubeconfig {
            Some(path) => {
                let kubeconfig = Kubeconfig::read_from(path).map_err(|e| {
                    CliError::Config(format!("cannot read kubeconfig {}: {e}", path.display()))
                })?;
                Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .map_err(|e| {
                        CliError::Config(format!("invalid kubeconfig {}: {e}", path.display()))
                    })?
            }
            None => match Kubeconfig::read() {
                Ok(kubeconfig) => Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .map_err(|e| CliError::Config(format!("invalid kubeconfig: {e}")))?,
                Err(read_error) => {
                    if self.global.context.is_none()
                        && let Ok(config) = Config::incluster()
                    {
                        config
                    } else {
                        return Err(CliError::Config(format!(
                            "no kubeconfig found ({read_error}): set KUBECONFIG or pass --kubeconfig"
                        )));
                    }
                }
            },
        };
        self.apply_overrides(&mut config);
        let namespace = self
            .global
            .namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone());
        self.debug(
            1,
            format!("using cluster {} namespace {namespace}", config.cluster_url),
        );
        let client = Client::try_from(config)
            .map_err(|e| CliError::Config(format!("cannot make a Kubernetes client: {e}")))?;
        Ok(Kube { client, namespace })
    }

    /// kubectl's flags that change how requests are made: --token, --as, --as-group,
    /// --request-timeout.
    fn apply_overrides(&self, config: &mut Config) {
        let global = &self.global;
        if let Some(token) = &global.token {
            config.auth_info.token = Some(token.clone().into());
            config.auth_info.token_file = None;
        }
        if let Some(user) = &global.as_user {
            config.auth_info.impersonate = Some(user.clone());
            config.auth_info.impersonate_groups =
                (!global.as_group.is_empty()).then(|| global.as_group.clone());
        }
        if let Some(timeout) = global.request_timeout.filter(|t| !t.is_zero()) {
            config.connect_timeout = Some(timeout);
            config.read_timeout = Some(timeout);
            config.write_timeout = Some(timeout);
        }
    }
}

/// A connected client and the namespace commands act in.
#[derive(Clone)]
pub struct Kube {
    pub client: Client,
    pub namespace: String,
}

impl Kube {
    /// HelloStateful apps of the namespace.
    pub fn apps(&self) -> Api<HelloStateful> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Reads one app; a missing app lists what exists instead.
    pub async fn get_app(&self, name: &str) -> Result<HelloStateful, CliError> {
        match self.apps().get(name).await {
            Ok(app) => Ok(app),
            Err(error) => match explain(error, &Action::app("get", &self.namespace, name)) {
                CliError::NotFound {
                    namespace, name, ..
                } => {
                    let existing = self
                        .apps()
                        .list_metadata(&ListParams::default())
                        .await
                        .map(|list| {
                            list.items
                                .into_iter()
                                .filter_map(|m| m.metadata.name)
                                .collect()
                        })
                        .unwrap_or_default();
                    Err(CliError::NotFound {
                        namespace,
                        name,
                        existing,
                    })
                }
                other => Err(other),
            },
        }
    }

    /// The reconciler's Deployment, if it can be read.
    pub async fn reconciler(&self) -> ReconcilerState {
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), SYSTEM_NAMESPACE);
        match api.get_opt(RECONCILER).await {
            Ok(Some(deployment)) => ReconcilerState::Found(Box::new(deployment)),
            Ok(None) => ReconcilerState::Absent,
            Err(error) => ReconcilerState::Unknown(explain_briefly(&error)),
        }
    }
}

/// What is known of the reconciler's Deployment.
pub enum ReconcilerState {
    Found(Box<Deployment>),
    Absent,
    /// Could not read it (often: not allowed to).
    Unknown(String),
}

impl ReconcilerState {
    /// Pods of the Deployment that are available, if it was found.
    pub fn available(&self) -> Option<i32> {
        match self {
            ReconcilerState::Found(deployment) => Some(
                deployment
                    .status
                    .as_ref()
                    .and_then(|s| s.available_replicas)
                    .unwrap_or(0),
            ),
            _ => None,
        }
    }

    /// Image of the reconciler's container.
    pub fn image(&self) -> Option<String> {
        let ReconcilerState::Found(deployment) = self else {
            return None;
        };
        let containers = &deployment.spec.as_ref()?.template.spec.as_ref()?.containers;
        containers
            .iter()
            .find(|c| c.name == RECONCILER || c.name == "reconciler")
            .or(containers.first())
            .and_then(|c| c.image.clone())
    }

    /// A warning when requests would not be acknowledged, None when the reconciler runs or
    /// its state cannot be read.
    pub fn not_running_warning(&self) -> Option<String> {
        match self {
            ReconcilerState::Absent => Some(format!(
                "the reconciler is not installed (no Deployment {SYSTEM_NAMESPACE}/{RECONCILER}): nothing will act on this request until it runs; install it with `kubectl hellostateful install`"
            )),
            ReconcilerState::Found(_) if self.available() == Some(0) => Some(format!(
                "the reconciler Deployment {SYSTEM_NAMESPACE}/{RECONCILER} has no available pod: nothing will act on this request until it runs (see `kubectl -n {SYSTEM_NAMESPACE} get pods`)"
            )),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(color_enabled(false, None, true));
        assert!(color_enabled(false, Some(""), true));
        assert!(!color_enabled(false, Some("1"), true));
        assert!(!color_enabled(true, None, true));
        assert!(!color_enabled(false, None, false));
    }

    #[test]
    fn reconciler_warnings() {
        assert!(ReconcilerState::Absent.not_running_warning().is_some());
        assert!(
            ReconcilerState::Unknown("forbidden".into())
                .not_running_warning()
                .is_none()
        );
        let mut deployment = Deployment::default();
        let found = ReconcilerState::Found(Box::new(deployment.clone()));
        assert!(found.not_running_warning().is_some());
        deployment.status = Some(k8s_openapi::api::apps::v1::DeploymentStatus {
            available_replicas: Some(1),
            ..Default::default()
        });
        let found = ReconcilerState::Found(Box::new(deployment));
        assert!(found.not_running_warning().is_none());
        assert_eq!(found.image(), None);
    }
}
