//! The README and `--help` tell the same story: every option of a command's README section is an
//! option of that command, and every option `--help` shows is in the command's README section.

use std::collections::BTreeSet;

use clap::CommandFactory;

use crate::Cli;

/// The README at the workspace's root.
const README: &str = include_str!("../../../README.md");

/// A `### \`mlless …\`` section of the README: the command's path and the options it names.
#[derive(Debug)]
struct Section {
    /// `["generate", "ratings"]` for `### \`mlless generate ratings\``.
    path: Vec<String>,
    /// The `--long` names in the first column of the section's option tables.
    table_options: BTreeSet<String>,
    /// The `--long` names anywhere in the section: heading, tables and prose.
    mentioned: BTreeSet<String>,
    /// Whether the section says that the command takes every option of `mlless train`.
    takes_train_options: bool,
}

/// The `--name`s in `text` (letters, digits and `-` after two dashes).
fn long_options(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("--") {
        let after = &rest[at + 2..];
        let boundary = at == 0 || !rest[..at].ends_with(|c: char| c.is_alphanumeric() || c == '-');
        let name: String = after
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        if boundary && name.starts_with(|c: char| c.is_ascii_lowercase()) {
            names.insert(name.clone());
        }
        rest = &after[name.len()..];
    }
    names
}

/// The README's command sections, each until the next heading of the same or a higher level.
fn sections() -> Vec<Section> {
    let mut sections: Vec<Section> = Vec::new();
    let mut open = false;
    for line in README.lines() {
        if let Some(heading) = line.strip_prefix("### `mlless ") {
            let command = heading.split('`').next().unwrap_or_default();
            let words = command.split_whitespace();
            let path = words
                .take_while(|w| w.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
                .map(str::to_string)
                .collect();
            sections.push(Section {
                path,
                table_options: BTreeSet::new(),
                mentioned: long_options(heading),
                takes_train_options: false,
            });
            open = true;
            continue;
        }
        if line.starts_with("## ") || line.starts_with("### ") {
            open = false;
        }
        let Some(section) = sections.last_mut().filter(|_| open) else {
            continue;
        };
        if let Some(row) = line.strip_prefix("| ") {
            let first_cell = row.split(" | ").next().unwrap_or_default();
            section.table_options.extend(long_options(first_cell));
        }
        section.mentioned.extend(long_options(line));
        section.takes_train_options |= line.contains("Every option of `mlless train`");
    }
    sections
}

/// The command at `path` below `mlless`, with the global options propagated to it.
fn command_at(path: &[String]) -> clap::Command {
    let mut command = Cli::command();
    command.build();
    for name in path {
        command = command
            .find_subcommand(name)
            .unwrap_or_else(|| panic!("README names `mlless {}`: no such command", path.join(" ")))
            .clone();
    }
    command
}

/// The long options a command's `--help` shows (not `--help`, `--version` or hidden ones).
fn help_options(command: &clap::Command) -> BTreeSet<String> {
    command
        .get_arguments()
        .filter(|arg| !arg.is_hide_set())
        .filter_map(|arg| arg.get_long())
        .filter(|long| !matches!(*long, "help" | "version"))
        .map(str::to_string)
        .collect()
}

/// The options every command has (`--log-format`): documented once, in `train`'s table.
fn global_options() -> BTreeSet<String> {
    Cli::command()
        .get_arguments()
        .filter(|arg| arg.is_global_set())
        .filter_map(|arg| arg.get_long())
        .map(str::to_string)
        .collect()
}

/// The visible commands without subcommands, as paths below `mlless`.
fn leaf_commands(command: &clap::Command, prefix: &[String], out: &mut Vec<Vec<String>>) {
    for sub in command.get_subcommands().filter(|sub| !sub.is_hide_set()) {
        if sub.get_name() == "help" {
            continue;
        }
        let mut path = prefix.to_vec();
        path.push(sub.get_name().to_string());
        if sub.has_subcommands() {
            leaf_commands(sub, &path, out);
        } else {
            out.push(path);
        }
    }
}

#[test]
fn every_readme_option_is_an_option_of_its_command() {
    let sections = sections();
    assert!(
        sections.len() >= 10,
        "found only {} sections",
        sections.len()
    );
    for section in &sections {
        let help = help_options(&command_at(&section.path));
        let unknown: Vec<_> = section.table_options.difference(&help).collect();
        assert!(
            unknown.is_empty(),
            "README's `mlless {}` table lists {unknown:?}, which its --help does not have",
            section.path.join(" ")
        );
    }
}

#[test]
fn every_help_option_is_in_its_commands_readme_section() {
    let sections = sections();
    let globals = global_options();
    let mut leaves = Vec::new();
    leaf_commands(&Cli::command(), &[], &mut leaves);
    // A section that takes train's options ("Every option of `mlless train`") mentions them.
    let train_mentioned = sections
        .iter()
        .find(|section| section.path == ["train"])
        .map(|section| section.mentioned.clone())
        .unwrap_or_default();
    let mut problems = Vec::new();
    for path in leaves {
        let command = path.join(" ");
        let Some(section) = sections.iter().find(|section| section.path == path) else {
            problems.push(format!("`mlless {command}` has no README section"));
            continue;
        };
        let missing: Vec<_> = help_options(&command_at(&path))
            .into_iter()
            .filter(|name| {
                let inherited = section.takes_train_options && train_mentioned.contains(name);
                !globals.contains(name) && !section.mentioned.contains(name) && !inherited
            })
            .collect();
        if !missing.is_empty() {
            problems.push(format!(
                "`mlless {command}` has {missing:?}, which its README section does not mention"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let train = sections
        .iter()
        .find(|section| section.path == ["train"])
        .expect("a train section");
    assert!(
        globals.is_subset(&train.table_options),
        "the global options {globals:?} belong in train's table"
    );
}

#[test]
fn long_options_finds_names_and_skips_ranges_and_dashes_in_words() {
    let found =
        long_options("`--users U`, `--items I` | `--binary` \\| `--real-valued`, a--b, -- x");
    let expected: BTreeSet<String> = ["users", "items", "binary", "real-valued"]
        .map(String::from)
        .into();
    assert_eq!(found, expected);
}

#[test]
fn train_help_shows_data_and_model_as_required_without_empty_defaults() {
    let mut train = command_at(&["train".to_string()]);
    let usage = train.render_usage().to_string();
    assert!(usage.contains("--data <DATA> --model <MODEL>"), "{usage}");
    assert!(usage.contains("--resume <RUN>"), "{usage}");
    let help = train.render_long_help().to_string();
    assert!(!help.contains("[default: ]"), "{help}");
    assert!(help.contains("required, unless --resume"), "{help}");
}
