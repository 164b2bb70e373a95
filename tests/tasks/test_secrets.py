"""The object store's secret access key is masked like the API key: from the environment (boto3's
own variable) and from Luigi's [s3] section, in log lines and failure texts."""

import logging

from tasks.secrets import MASK, format_failure, install_log_scrubber, scrub

ENV_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
CFG_SECRET = "cfg-Secret-0f8a7c2e9b1d4e6f"


def test_the_store_secrets_are_scrubbed_from_the_environment_and_the_s3_section(monkeypatch, luigi_cfg, caplog):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", ENV_SECRET)
    luigi_cfg("s3", "aws_secret_access_key", CFG_SECRET)
    text = f"signing with {ENV_SECRET} or {CFG_SECRET}"
    assert scrub(text) == f"signing with {MASK} or {MASK}"
    assert ENV_SECRET not in format_failure(RuntimeError(text)) and CFG_SECRET not in format_failure(RuntimeError(text))
    install_log_scrubber()
    with caplog.at_level(logging.INFO):
        logging.getLogger("tasks.s3store").info("key %s", ENV_SECRET)
    assert ENV_SECRET not in caplog.text and MASK in caplog.text
