"""``rehydrate completion bash|zsh|fish``: a completion script generated from the argparse parser.

No runtime dependency (argcomplete would be one): the script is static, written from the parser's
own commands, options and choices, so it cannot drift from the command line it completes.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable

from rehydrate.cli._common import emit
from rehydrate.cli._parser import Commands, exits

__all__ = ["register", "script"]


def register(commands: Commands) -> None:
    """Add ``rehydrate completion``: it walks the whole parser (``commands.whole``)."""
    command = commands.add(
        "completion",
        "print a shell completion script (bash, zsh or fish)",
        "Print a completion script for SHELL, generated from this command's own options. Install it:\n\n"
        "  bash: rehydrate completion bash > ~/.local/share/bash-completion/completions/rehydrate\n"
        "  zsh:  rehydrate completion zsh > ~/.zfunc/_rehydrate  (with fpath+=~/.zfunc before compinit)\n"
        "  fish: rehydrate completion fish > ~/.config/fish/completions/rehydrate.fish\n\n"
        "or for this shell only: source <(rehydrate completion bash).",
        exits("printed", None),
        functools.partial(_run, commands.whole),
    )
    command.add_argument("shell", choices=["bash", "zsh", "fish"], help="the shell")


def _run(whole: Callable[[], argparse.ArgumentParser], args: argparse.Namespace) -> int:
    emit(script(whole(), args.shell))
    return 0


def _commands(parser: argparse.ArgumentParser) -> dict[str, tuple[str, argparse.ArgumentParser]]:
    """command -> (its one-line help, its parser)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            return {name: (helps.get(name, ""), sub) for name, sub in action.choices.items()}
    return {}


def _options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings and a.help != argparse.SUPPRESS]


def _takes_value(action: argparse.Action) -> bool:
    return action.nargs != 0


def _positional_choices(parser: argparse.ArgumentParser) -> list[str]:
    return [str(c) for a in parser._actions if not a.option_strings and a.choices for c in a.choices]


def _bash(parser: argparse.ArgumentParser) -> str:
    commands = _commands(parser)
    global_options = _options(parser)
    valued = sorted(
        {s for a in global_options if _takes_value(a) for s in a.option_strings}
        | {
            s
            for _, sub in commands.values()
            for a in _options(sub)
            if _takes_value(a)
            for s in a.option_strings
        }
    )
    lines = [
        "# bash completion for rehydrate (rehydrate completion bash)",
        "_rehydrate() {",
        '    local cur="${COMP_WORDS[COMP_CWORD]}" prev="" command="" i word',
        '    (( COMP_CWORD > 0 )) && prev="${COMP_WORDS[COMP_CWORD-1]}"',
        "    for (( i = 1; i < COMP_CWORD; i++ )); do",
        '        word="${COMP_WORDS[i]}"',
        '        case "$word" in',
        f"            {'|'.join(valued)}) (( i++ )) ;;",
        "            -*) ;;",
        '            *) command="$word"; break ;;',
        "        esac",
        "    done",
        '    case "$prev" in',
    ]
    choices: dict[str, list[str]] = {}
    for action in [*global_options, *(a for _, sub in commands.values() for a in _options(sub))]:
        if action.choices:
            for option in action.option_strings:
                choices[option] = [str(c) for c in action.choices]
    for option, values in sorted(choices.items()):
        lines.append(f"        {option}) {_compgen(values)}; return ;;")
    lines += [
        "    esac",
        '    case "$command" in',
        f'        "") {_compgen([*commands, *_flags(global_options)])} ;;',
    ]
    for name, (_, sub) in commands.items():
        words = [*_flags(_options(sub)), *_flags(global_options)]
        positional = _positional_choices(sub)
        lines.append(f"        {name})")
        lines.append(f'            if [[ "$cur" == -* ]]; then {_compgen(sorted(set(words)))}')
        if positional:
            lines.append(f"            else {_compgen(positional)}")
        lines.append("            fi ;;")
    lines += ["    esac", "}", "complete -o default -F _rehydrate rehydrate", ""]
    return "\n".join(lines)


def _compgen(words: list[str]) -> str:
    import shlex  # here, not at the top: --help imports this module

    return f'COMPREPLY=($(compgen -W {shlex.quote(" ".join(words))} -- "$cur"))'


def _flags(actions: list[argparse.Action]) -> list[str]:
    return [s for a in actions for s in a.option_strings if s.startswith("--")]


def _quote_zsh(text: str) -> str:
    return text.replace("\\", "\\\\").replace(":", "\\:").replace("'", "'\\''")


def _zsh(parser: argparse.ArgumentParser) -> str:
    commands = _commands(parser)
    lines = [
        "#compdef rehydrate",
        "# zsh completion for rehydrate (rehydrate completion zsh)",
        "_rehydrate() {",
        "    local -a commands options",
        "    local command='' i",
        "    commands=(",
        *(f"        '{name}:{_quote_zsh(help)}'" for name, (help, _) in commands.items()),
        "    )",
        "    for (( i = 2; i < CURRENT; i++ )); do",
        "        case ${words[i]} in",
        "            -*) ;;",
        "            *) command=${words[i]}; break ;;",
        "        esac",
        "    done",
        "    case $command in",
        "        '')",
        "            if [[ ${words[CURRENT]} == -* ]]; then",
        f"                compadd -- {' '.join(_flags(_options(parser)))}",
        "            else",
        "                _describe command commands",
        "            fi ;;",
    ]
    for name, (_, sub) in commands.items():
        flags = sorted(set(_flags(_options(sub)) + _flags(_options(parser))))
        lines.append(f"        {name})")
        lines.append("            if [[ ${words[CURRENT]} == -* ]]; then")
        lines.append(f"                compadd -- {' '.join(flags)}")
        positional = _positional_choices(sub)
        lines.append("            else")
        lines.append(
            f"                compadd -- {' '.join(positional)}" if positional else "                _files"
        )
        lines.append("            fi ;;")
    lines += ["    esac", "}", '_rehydrate "$@"', ""]
    return "\n".join(lines)


def _fish(parser: argparse.ArgumentParser) -> str:
    import shlex

    commands = _commands(parser)
    not_yet = shlex.quote("not __fish_seen_subcommand_from " + " ".join(commands))
    lines = ["# fish completion for rehydrate (rehydrate completion fish)", "complete -c rehydrate -f"]
    for name, (help, _) in commands.items():
        lines.append(f"complete -c rehydrate -n {not_yet} -a {name} -d {shlex.quote(help)}")

    def option_lines(actions: list[argparse.Action], condition: str) -> None:
        for action in actions:
            long = [s[2:] for s in action.option_strings if s.startswith("--")]
            short = [s[1:] for s in action.option_strings if len(s) == 2]
            if not long:
                continue
            parts = [f"complete -c rehydrate -n {shlex.quote(condition)} -l {long[0]}"]
            if short:
                parts.append(f"-s {short[0]}")
            if action.choices:
                parts.append(f"-x -a {shlex.quote(' '.join(str(c) for c in action.choices))}")
            elif _takes_value(action):
                parts.append("-r")
            parts.append(f"-d {shlex.quote((action.help or '').split(';')[0])}")
            lines.append(" ".join(parts))

    option_lines(_options(parser), "true")
    for name, (_, sub) in commands.items():
        option_lines(_options(sub), f"__fish_seen_subcommand_from {name}")
        positional = _positional_choices(sub)
        if positional:
            lines.append(
                f"complete -c rehydrate -n '__fish_seen_subcommand_from {name}' -a "
                + shlex.quote(" ".join(positional))
            )
    return "\n".join(lines) + "\n"


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script of ``parser`` for ``shell`` (bash, zsh or fish)."""
    writers = {"bash": _bash, "zsh": _zsh, "fish": _fish}
    if shell not in writers:
        raise ValueError(f"no completion for {shell!r}: use bash, zsh or fish")
    return writers[shell](parser).rstrip("\n")
