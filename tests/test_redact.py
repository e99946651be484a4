"""Secrets-shaped arguments are hidden from displayed command lines, the flag's name kept; arguments
that only look alike (whole words decide) are left as they are."""

from __future__ import annotations

import pytest

from oomwatch.redact import REDACTED, redact_argv, secret_name

R = REDACTED

CASES = [
    # (argv, as shown)
    (["--api-key=sekrit"], [f"--api-key={R}"]),
    (["--api_key", "sekrit"], ["--api_key", R]),
    (["--apiKey=sekrit"], [f"--apiKey={R}"]),
    (["--token", "abc"], ["--token", R]),
    (["--hf-token=abc"], [f"--hf-token={R}"]),
    (["--access_token=abc", "--client-secret", "s3"], [f"--access_token={R}", "--client-secret", R]),
    (["--password=hunter2"], [f"--password={R}"]),
    (["--password", "hunter2", "--epochs", "3"], ["--password", R, "--epochs", "3"]),
    (["--passwd", "hunter2"], ["--passwd", R]),
    (["-token=abc"], [f"-token={R}"]),
    (["--auth", "user:pass"], ["--auth", R]),
    (["--wandb.api.key=abc"], [f"--wandb.api.key={R}"]),
    # a bare secret flag followed by another flag: that flag is not its value
    (["--token", "--epochs", "3"], ["--token", "--epochs", "3"]),
    # environment-style and Hydra overrides
    (["HF_TOKEN=abc", "python", "t.py"], [f"HF_TOKEN={R}", "python", "t.py"]),
    (["WANDB_API_KEY=abc"], [f"WANDB_API_KEY={R}"]),
    (["DB_PASSWORD=x", "MY_SECRET=y"], [f"DB_PASSWORD={R}", f"MY_SECRET={R}"]),
    (["wandb.api_key=abc", "+trainer.token=t"], [f"wandb.api_key={R}", f"+trainer.token={R}"]),
    # header-like arguments
    (["-H", "Authorization: Bearer abc.def"], ["-H", f"Authorization: {R}"]),
    (["-H", "X-Api-Key: abc"], ["-H", f"X-Api-Key: {R}"]),
    (["--header=Authorization: Basic dXNlcjpwYXNz"], [f"--header=Authorization: {R}"]),
    (["Bearer abc"], [f"Bearer {R}"]),
    (["--header", "Bearer abc"], ["--header", f"Bearer {R}"]),
    # a URL's password
    (["--url=https://me:pw@example.com/x"], [f"--url=https://me:{R}@example.com/x"]),
    (["git+https://me:pw@host/repo.git"], [f"git+https://me:{R}@host/repo.git"]),
    # not secrets: left as they are
    (["--keep_in_memory"], ["--keep_in_memory"]),
    (["--keep-in-memory", "true"], ["--keep-in-memory", "true"]),
    (["--monkey=3"], ["--monkey=3"]),
    (["--max-tokens", "512", "--max_new_tokens=64"], ["--max-tokens", "512", "--max_new_tokens=64"]),
    (["--tokenizer", "gpt2", "--tokenizer_name=t5"], ["--tokenizer", "gpt2", "--tokenizer_name=t5"]),
    (["--pad-token-id", "0", "--eos_token=</s>"], ["--pad-token-id", "0", "--eos_token=</s>"]),
    (["--key-file", "/etc/k.pem", "--secret-name=prod"], ["--key-file", "/etc/k.pem", "--secret-name=prod"]),
    (["--keyboard=us", "--author=me", "--authority=x"], ["--keyboard=us", "--author=me", "--authority=x"]),
    (["python", "train.py", "--epochs", "3", "lr=0.1"], ["python", "train.py", "--epochs", "3", "lr=0.1"]),
    (["TOKENIZERS_PARALLELISM=false"], ["TOKENIZERS_PARALLELISM=false"]),
    (["-p", "8", "-1", "--", "x"], ["-p", "8", "-1", "--", "x"]),
    (["--url=https://example.com/a:b@c"], ["--url=https://example.com/a:b@c"]),
    (["Note: Basic usage"], ["Note: Basic usage"]),
    ([], []),
]


@pytest.mark.parametrize(("argv", "shown"), CASES, ids=[" ".join(a) or "empty" for a, _ in CASES])
def test_redact_argv(argv: list[str], shown: list[str]) -> None:
    assert redact_argv(argv) == shown


def test_the_argv_given_is_not_changed() -> None:
    argv = ["--token", "abc"]
    redact_argv(argv)
    assert argv == ["--token", "abc"]


@pytest.mark.parametrize(
    ("name", "secret"),
    [("--apiKey", True), ("HFToken", True), ("SECRET", True), ("--credentials", True), ("--Authorization", True),
     ("--max_tokens", False), ("--keep_in_memory", False), ("--monkey", False), ("--pad_token", False),
     ("--token-budget", True), ("--api-key-env", False)],
)  # fmt: skip
def test_secret_name(name: str, secret: bool) -> None:
    assert secret_name(name) is secret
