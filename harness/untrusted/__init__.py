"""What perfdag reads but does not control, read defensively: files a user names (regular files only,
bounded), YAML in the 1.2 core schema, and records perfdag wrote earlier under the artifacts root,
which anyone who can write there may have edited."""
