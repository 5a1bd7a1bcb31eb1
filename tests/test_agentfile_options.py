"""An agent file's option of the wrong kind: the error names the file, the key, the value given
and what the option takes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.agentfile import load_agent_file
from tether.errors import ConfigError

HEAD = 'name = "a"\n'


def load(folder: Path, text: str) -> ConfigError:
    path = folder / "agent.toml"
    path.write_text(HEAD + text)
    with pytest.raises(ConfigError) as raised:
        load_agent_file(path)
    return raised.value


def test_a_path_option_given_a_number_says_it_takes_a_path_string(tmp_path: Path) -> None:
    error = load(tmp_path, '[[tools]]\nbuiltin = "files"\nroot = 5\n')
    assert str(error) == (
        f"{tmp_path / 'agent.toml'}: [[tools]] #1 (files): root must be a path string such as "
        '"./data", or a table of path strings by name such as { docs = "./docs" }, '
        "not 5 (a whole number)"
    )


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (
            '[[tools]]\nbuiltin = "files"\nroot = ["docs"]\n',
            '(files): root must be a path string such as "./data", or a table of path strings '
            'by name such as { docs = "./docs" }, not ["docs"] (an array)',
        ),
        (
            '[[tools]]\nbuiltin = "files"\nroot = { docs = 5 }\n',
            '(files): root.docs must be a path string such as "./data", not 5 (a whole number)',
        ),
        (
            '[[tools]]\nbuiltin = "files"\nroot = "."\ntrusted = "yes"\n',
            '(files): trusted must be true or false, or an array of strings such as ["a", "b"], '
            'not "yes" (a string)',
        ),
        (
            '[[tools]]\nbuiltin = "shell"\nworkspace = 5\nallow = ["ls"]\n',
            '(shell): workspace must be a path string such as "./data", not 5 (a whole number)',
        ),
        (
            '[[tools]]\nbuiltin = "shell"\nworkspace = "."\nallow = ["ls"]\ntimeout = "10"\n',
            '(shell): timeout must be a number such as 2.5, not "10" (a string)',
        ),
        (
            '[[tools]]\nbuiltin = "shell"\nworkspace = "."\nallow = ["ls", 5]\n',
            "(shell): allow[1] must be a string, not 5 (a whole number)",
        ),
        (
            '[[tools]]\nbuiltin = "shell"\nworkspace = "."\nallow = ["ls"]\nisolation = "docker"\n',
            '(shell): isolation must be one of "auto", "bwrap" or "none", not "docker" (a string)',
        ),
        (
            '[[tools]]\nbuiltin = "shell"\nworkspace = "."\nallow = ["ls"]\n'
            'limits = { cpu_seconds = "5" }\n',
            '(shell): limits.cpu_seconds must be a whole number such as 10, not "5" (a string)',
        ),
        (
            '[[tools]]\nbuiltin = "sql"\ndatabase = 5\n',
            '(sql): database must be a path string such as "./data", not 5 (a whole number)',
        ),
        (
            '[[tools]]\nbuiltin = "http"\nallow_hosts = "api.example.com"\n',
            '(http): allow_hosts must be an array of strings such as ["a", "b"], '
            'not "api.example.com" (a string)',
        ),
        (
            '[[tools]]\npack = "engineering/shell"\nworkspace = 5\n',
            '(engineering/shell): workspace must be a path string such as "./data", '
            "not 5 (a whole number)",
        ),
        (
            '[[tools]]\nbuiltin = "files"\nroot = "."\nmax_read_bytes = true\n',
            "(files): max_read_bytes must be a whole number such as 10, not true (a boolean)",
        ),
        (
            '[tools]\nbuiltin = "files"\n',
            'tools must be an array of [[tools]] tables, not { builtin = "files" } (a table)',
        ),
        (
            '[limits]\nmax_steps = "12"\n',
            '[limits]: max_steps must be a whole number such as 10, not "12" (a string)',
        ),
        (
            "[limits]\nthink = 5\n",
            "[limits.think] must be a table, not 5 (a whole number)",
        ),
        (
            '[model]\nprefer = "local"\n',
            '[model]: prefer must be an array of strings such as ["a", "b"], '
            'not "local" (a string)',
        ),
        (
            '[memory]\ndatabase = "m.db"\nnamespace = 5\n',
            "[memory]: namespace must be a string, not 5 (a whole number)",
        ),
        (
            '[knowledge]\ndatabase = "kb.db"\nmin_confidence = "high"\n',
            '[knowledge]: min_confidence must be a number such as 2.5, not "high" (a string)',
        ),
        (
            '[thinking]\nmax_replans = "2"\n',
            '[thinking]: max_replans must be a whole number such as 10, not "2" (a string)',
        ),
        (
            '[[mcp]]\nname = "t"\ncommand = ["x"]\ntimeout = "5"\n',
            "[[mcp]] #1 (t): timeout must be a positive number of seconds such as 60, "
            'not "5" (a string)',
        ),
        (
            '[[mcp]]\nname = "t"\ncommand = ["x"]\ncwd = 5\n',
            '[[mcp]] #1 (t): cwd must be a path string such as "./server", not 5 (a whole number)',
        ),
        (
            "output_file = 5\n",
            'output_file must be a path string such as "./schema.json", not 5 (a whole number)',
        ),
        (
            '[policy]\nallow = "read_file"\n',
            '[policy]: allow must be an array of tables ([[allow]]), not "read_file" (a string)',
        ),
    ],
)
def test_an_option_of_the_wrong_kind_names_what_was_given_and_what_it_takes(
    tmp_path: Path, text: str, says: str
) -> None:
    error = load(tmp_path, text)
    assert str(error).startswith(f"{tmp_path / 'agent.toml'}: ")
    assert says in str(error)


def test_a_value_of_the_wrong_kind_under_env_is_named_by_its_kind_only(tmp_path: Path) -> None:
    error = load(
        tmp_path,
        '[[tools]]\nbuiltin = "shell"\nworkspace = "."\nallow = ["ls"]\n'
        'env = { TOKEN = ["hunter2-Kx9"] }\n',
    )
    assert "hunter2-Kx9" not in str(error)
    assert str(error).endswith("(shell): env.TOKEN must be a string, not an array")


def test_nested_tables_are_made_into_the_options_they_stand_for(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text(
        HEAD + '[[tools]]\nbuiltin = "shell"\nworkspace = "."\nallow = { ls = { max_args = 2 } }\n'
        "limits = { cpu_seconds = 5 }\n"
    )
    agent = load_agent_file(path)
    assert "run_command" in agent.spec.tool_map
