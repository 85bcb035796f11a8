"""Administration shared by the CLI, the admin API and the console: each of them calls these
operations and only translates their answers (a line of text, a JSON body, a page).

- ``accounts``: the API's bearer tokens and its audit log (tables in ``schema``);
- ``neighbours``: defining, altering and removing the links to neighbouring brokers;
- ``subscriber_queues``: deleting a queue that subscriptions deliver to;
- configuration backup (``broker config export`` / ``import``): ``config_file`` (the file's
  typed content and its checks), ``config_changes`` (what an import would change),
  ``toml_writer`` (the file's text), all pure; ``config_backup`` reads and applies them.
"""
