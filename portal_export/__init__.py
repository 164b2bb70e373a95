"""Export a partner portal's reports from behind reCAPTCHA v2, solving it through CaptchaAI. The core of the pipeline,
free of any orchestrator: the CaptchaAI client, the one-session region export with its retry policy, the key-level
breaker and the day's solve health."""
