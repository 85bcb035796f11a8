"""Administration shared by the CLI, the admin API and the console: each of them calls these
operations and only translates their answers (a line of text, a JSON body, a page).

- ``accounts``: the API's bearer tokens and its audit log (tables in ``schema``);
- ``neighbours``: defining and removing the links to neighbouring brokers;
- ``subscriber_queues``: deleting a queue that subscriptions deliver to.
"""
