SELECT trials.pool, trials.study_id, trials.state, trials.backend, trials.requires_energy, trials.requires_gpu, studies.team_id, studies.priority, studies.weight, count(*) AS n 
FROM trials JOIN studies ON studies.id = trials.study_id 
WHERE trials.state = 'running' GROUP BY trials.pool, trials.study_id, trials.state, trials.backend, trials.requires_energy, trials.requires_gpu, studies.team_id, studies.priority, studies.weight UNION ALL SELECT trials.pool, trials.study_id, trials.state, trials.backend, trials.requires_energy, trials.requires_gpu, studies.team_id, studies.priority, studies.weight, 1 AS n 
FROM studies JOIN trials ON trials.id = (SELECT trials.id 
FROM trials 
WHERE trials.study_id = studies.id AND trials.state = 'queued' ORDER BY trials.number 
 LIMIT 1) 
WHERE studies.state IN ('running', 'paused')
