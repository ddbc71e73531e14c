"""Who may do what: the ToolContext of a turn and the grants it carries."""
