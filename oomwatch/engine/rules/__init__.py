"""The rules model: rules/ (YAML data) loaded into checked, compiled rules.

What each kind of rule is and how it is read: fingerprints (`fingerprints`), verdict rules
(`verdict_rules`), cause rules (`cause_rules`), the condition language (`conditions`), activities and
streams (`activity_rules`), code rules (`code_rules`); the RuleSet they are gathered in (`ruleset`);
the file walk (`loader`, over `rules_yaml`); and the checks beyond loading: catastrophic backtracking
(`redos`) and every example (`lint`).

Imports only the engine: this package, and the engine's leaf modules (readlimit, yamlsafe,
verdicts); `lint` alone runs examples through the scanner's pieces (prefix, text, fields, facts, code).
"""
