"""The chat commands: the chat's front end over the services, one module per group."""
