SELECT trials.pool, trials.study_id, trials.state, trials.backend, trials.requires_energy, trials.requires_gpu, studies.team_id, studies.priority, studies.weight, count(*) AS n 
FROM trials JOIN studies ON studies.id = trials.study_id 
WHERE trials.state IN ('queued', 'running') GROUP BY trials.pool, trials.study_id, trials.state, trials.backend, trials.requires_energy, trials.requires_gpu, studies.team_id, studies.priority, studies.weight
