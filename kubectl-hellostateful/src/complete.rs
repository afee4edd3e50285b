//! `__complete`: what kubectl's plugin completion asks (kubectl 1.26+ runs the
//! `kubectl_complete-hellostateful` script shipped beside the plugin, which calls this with
//! the words after `kubectl hellostateful`, the last one being completed). Answers as cobra
//! does: one candidate per line (`value<TAB>description`), then `:<directive>`.

use clap::{Arg, Command as ClapCommand, CommandFactory};
use kube::api::ListParams;
use kube::config::Kubeconfig;
use kube::{Api, ResourceExt};

use crate::cli::{Cli, GlobalArgs};
use crate::context::Ctx;
use crate::output::printable;

/// cobra's ShellCompDirectiveNoFileComp: do not fall back to file names.
const NO_FILES: u8 = 4;
/// cobra's ShellCompDirectiveDefault: the shell may complete file names.
const FILES: u8 = 0;

/// What the words typed so far mean.
#[derive(Debug, Default)]
pub struct Typed {
    pub subcommand: Option<String>,
    pub positionals: Vec<String>,
    /// The flag whose value is being completed (its long name).
    pub flag_value: Option<String>,
    pub global: GlobalArgs,
}

/// Reads the words before the one being completed.
pub fn typed(before: &[String]) -> Typed {
    let root = Cli::command();
    let mut typed = Typed::default();
    let mut words = before.iter().peekable();
    while let Some(word) = words.next() {
        let Some(flag) = word.strip_prefix('-') else {
            match typed.subcommand {
                None => typed.subcommand = Some(word.clone()),
                Some(_) => typed.positionals.push(word.clone()),
            }
            continue;
        };
        let (name, inline) = match flag.split_once('=') {
            Some((name, value)) => (name, Some(value.to_string())),
            None => (flag, None),
        };
        let Some(arg) = find_arg(&root, typed.subcommand.as_deref(), name) else {
            continue;
        };
        if !arg.get_action().takes_values()
            || arg.get_num_args().is_some_and(|n| n.min_values() == 0)
        {
            continue;
        }
        let long = arg.get_long().unwrap_or_default().to_string();
        let value = match inline {
            Some(value) => Some(value),
            None => words.next().cloned(),
        };
        match value {
            None => typed.flag_value = Some(long),
            Some(value) => match long.as_str() {
                "namespace" => typed.global.namespace = Some(value),
                "context" => typed.global.context = Some(value),
                "kubeconfig" => typed.global.kubeconfig = Some(value.into()),
                "cluster" => typed.global.cluster = Some(value),
                "user" => typed.global.user = Some(value),
                _ => {}
            },
        }
    }
    typed
}

/// The argument `-x` / `--xyz` of the subcommand or a global one.
fn find_arg(root: &ClapCommand, subcommand: Option<&str>, name: &str) -> Option<Arg> {
    let matches = |arg: &&Arg| match name.strip_prefix('-') {
        Some(long) => arg.get_long() == Some(long),
        None => name.len() == 1 && arg.get_short() == name.chars().next(),
    };
    let sub = subcommand.and_then(|s| root.find_subcommand(s));
    sub.into_iter()
        .flat_map(|s| s.get_arguments())
        .chain(root.get_arguments())
        .find(matches)
        .cloned()
}

/// Candidates and the directive for `words` (the last is the word being completed).
/// `global` holds the global flags clap took before the first word (`-n NS status ...`).
pub async fn complete(global: &GlobalArgs, words: &[String]) -> String {
    let (current, before) = match words.split_last() {
        Some((current, before)) => (current.as_str(), before),
        None => ("", &[][..]),
    };
    let mut typed = typed(before);
    // Flags clap took (all of them, --token and --as too), overridden by those on the line.
    let on_line = std::mem::replace(&mut typed.global, global.clone());
    let merged = &mut typed.global;
    merged.namespace = on_line.namespace.or(merged.namespace.take());
    merged.context = on_line.context.or(merged.context.take());
    merged.kubeconfig = on_line.kubeconfig.or(merged.kubeconfig.take());
    merged.cluster = on_line.cluster.or(merged.cluster.take());
    merged.user = on_line.user.or(merged.user.take());
    let root = Cli::command();
    let sub = typed
        .subcommand
        .as_deref()
        .and_then(|s| root.find_subcommand(s));
    let (candidates, directive) = if let Some(flag) = &typed.flag_value {
        flag_values(&typed, sub, flag).await
    } else if current.starts_with('-') {
        let flags = sub
            .into_iter()
            .flat_map(|s| s.get_arguments())
            .chain(root.get_arguments())
            .filter(|a| !a.is_hide_set())
            .filter_map(|a| Some((format!("--{}", a.get_long()?), help(a))))
            .collect();
        (flags, NO_FILES)
    } else if sub.is_none() {
        let commands = root
            .get_subcommands()
            .filter(|s| !s.is_hide_set())
            .map(|s| {
                (
                    s.get_name().to_string(),
                    s.get_about().map(|a| a.to_string()).unwrap_or_default(),
                )
            })
            .collect();
        (commands, NO_FILES)
    } else if let Some(sub) = sub {
        (positional_values(&typed, sub).await, NO_FILES)
    } else {
        (Vec::new(), NO_FILES)
    };
    let mut out = String::new();
    for (value, description) in candidates
        .into_iter()
        .filter(|(v, _)| v.starts_with(current))
    {
        // One line per candidate, drawn by the shell: names and descriptions read from the
        // cluster must not break the line or reach the terminal as escapes.
        let value = printable(&value);
        let description = printable(description.lines().next().unwrap_or_default());
        if description.is_empty() {
            out.push_str(&format!("{value}\n"));
        } else {
            out.push_str(&format!("{value}\t{description}\n"));
        }
    }
    out.push_str(&format!(":{directive}\n"));
    out
}

fn help(arg: &Arg) -> String {
    arg.get_help().map(|h| h.to_string()).unwrap_or_default()
}

/// Candidates for the next positional word of `sub`: an app name first, then (`verify`,
/// `backups describe|delete`) one of its backup ids; `backups` also takes its subcommands.
async fn positional_values(typed: &Typed, sub: &ClapCommand) -> Vec<(String, String)> {
    let words: Vec<&str> = typed.positionals.iter().map(String::as_str).collect();
    let nested = sub
        .get_subcommands()
        .find(|s| words.first() == Some(&s.get_name()));
    let (command, words) = match nested {
        Some(nested) => (nested, &words[1..]),
        None => (sub, &words[..]),
    };
    let takes_id = command.get_positionals().any(|a| a.get_id() == "id");
    match words {
        [] if takes_app_name(command) => {
            let mut values: Vec<(String, String)> = sub
                .get_subcommands()
                .filter(|_| nested.is_none())
                .map(|s| {
                    let about = s.get_about().map(|a| a.to_string()).unwrap_or_default();
                    (s.get_name().to_string(), about)
                })
                .collect();
            values.extend(app_names(&typed.global).await);
            values
        }
        [name] if takes_id => backup_ids(typed, name).await,
        _ => Vec::new(),
    }
}

/// Whether the subcommand's first positional is an app name.
fn takes_app_name(sub: &ClapCommand) -> bool {
    sub.get_positionals()
        .next()
        .is_some_and(|a| a.get_id() == "name")
}

async fn flag_values(
    typed: &Typed,
    sub: Option<&ClapCommand>,
    flag: &str,
) -> (Vec<(String, String)>, u8) {
    match flag {
        "kubeconfig" => (Vec::new(), FILES),
        "namespace" => (namespaces(&typed.global).await, NO_FILES),
        "context" => (contexts(&typed.global), NO_FILES),
        "from" => match typed.positionals.first() {
            Some(name) => (backup_ids(typed, name).await, NO_FILES),
            None => (Vec::new(), NO_FILES),
        },
        _ => {
            let root = Cli::command();
            let values = find_arg(&root, sub.map(|s| s.get_name()), &format!("-{flag}"))
                .map(|arg| {
                    arg.get_possible_values()
                        .into_iter()
                        .map(|v| {
                            (
                                v.get_name().to_string(),
                                v.get_help().map(|h| h.to_string()).unwrap_or_default(),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            (values, NO_FILES)
        }
    }
}

fn contexts(global: &GlobalArgs) -> Vec<(String, String)> {
    let kubeconfig = match &global.kubeconfig {
        Some(path) => Kubeconfig::read_from(path),
        None => Kubeconfig::read(),
    };
    kubeconfig
        .map(|k| {
            k.contexts
                .into_iter()
                .map(|c| (c.name, String::new()))
                .collect()
        })
        .unwrap_or_default()
}

async fn namespaces(global: &GlobalArgs) -> Vec<(String, String)> {
    let Ok(kube) = Ctx::new(global.clone()).connect().await else {
        return Vec::new();
    };
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(kube.client);
    api.list_metadata(&ListParams::default())
        .await
        .map(|list| {
            list.items
                .iter()
                .map(|n| (n.name_any(), String::new()))
                .collect()
        })
        .unwrap_or_default()
}

async fn app_names(global: &GlobalArgs) -> Vec<(String, String)> {
    let Ok(kube) = Ctx::new(global.clone()).connect().await else {
        return Vec::new();
    };
    kube.apps()
        .list(&ListParams::default())
        .await
        .map(|list| {
            list.items
                .iter()
                .map(|app| (app.name_any(), format!("{} replica(s)", app.spec.replicas)))
                .collect()
        })
        .unwrap_or_default()
}

/// `latest` and the backup the app's status names (listing every backup needs a pod: too
/// slow for a key press).
async fn backup_ids(typed: &Typed, name: &str) -> Vec<(String, String)> {
    let mut ids = vec![(
        "latest".to_string(),
        "the newest complete backup".to_string(),
    )];
    if let Ok(kube) = Ctx::new(typed.global.clone()).connect().await
        && let Ok(app) = kube.apps().get(name).await
        && let Some(last) = app.status.and_then(|s| s.last_backup)
    {
        ids.push((last.id, format!("last backup, {}", last.time)));
    }
    ids
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        text.split(' ').map(str::to_string).collect()
    }

    #[tokio::test]
    async fn commands_then_flags_then_their_values() {
        let out = complete(&GlobalArgs::default(), &words("ba")).await;
        assert_eq!(
            out,
            "backup\tBack up an app now\nbackups\tList an app's backups; describe or delete one\n:4\n"
        );
        let out = complete(&GlobalArgs::default(), &words("backups de")).await;
        assert!(
            out.starts_with("describe\tShow one backup")
                && out.contains("\ndelete\tDelete one backup"),
            "{out}"
        );
        let out = complete(&GlobalArgs::default(), &words("backups describe hello ")).await;
        assert!(
            out.starts_with("latest\t"),
            "a backup id after the app: {out}"
        );
        let out = complete(&GlobalArgs::default(), &words("verify hello l")).await;
        assert!(out.starts_with("latest\t"), "{out}");
        let out = complete(&GlobalArgs::default(), &words("restore hello --fr")).await;
        assert!(out.starts_with("--from\t"), "{out}");
        let out = complete(&GlobalArgs::default(), &words("get hello -o ya")).await;
        assert!(out.starts_with("yaml"), "{out}");
        assert!(out.ends_with(":4\n"));
        assert_eq!(
            complete(&GlobalArgs::default(), &words("list --kubeconfig ")).await,
            ":0\n"
        );
    }

    #[test]
    fn global_flags_before_and_after_the_command_are_read() {
        let typed = typed(&words(
            "-n prod status --context=kind hello --kubeconfig /k",
        ));
        assert_eq!(typed.subcommand.as_deref(), Some("status"));
        assert_eq!(typed.positionals, ["hello"]);
        assert_eq!(typed.global.namespace.as_deref(), Some("prod"));
        assert_eq!(typed.global.context.as_deref(), Some("kind"));
        assert_eq!(typed.flag_value, None);
        let typed = super::typed(&words("restore hello --from"));
        assert_eq!(typed.flag_value.as_deref(), Some("from"));
        let typed = super::typed(&words("backup hello --wait"));
        assert_eq!(
            typed.flag_value, None,
            "--wait takes an optional value only with ="
        );
    }
}
