
/*
 * Copyright (C) ioa authors
 *
 * The hub's Lua scripts, redis-scripts/<file>.lua, listed once.  From this
 * list, in this order, config embeds them into the module (a generated
 * header of string literals: it reads the lines below with sed) and
 * ngx_ioa.h numbers them (ngx_ioa_script_e); the worker takes from it the
 * names of those it reads from --scripts DIR and runs itself (iw_lua_e,
 * iw.h), so no hub script is named anywhere else.
 *
 * A line is H(NAME, file) for a script only the hub runs, W(NAME, file) for
 * one the worker runs too; NAME is its enumerators' suffix.  The user of
 * the list passes a macro for each kind: the module the same one twice,
 * the worker one that makes nothing of H.  Each entry stays on a line of
 * its own, the first thing on it: that is what config's sed reads.
 * Appending a script is safe; reordering renumbers the module's enum,
 * which nothing outside one build sees.
 */


#ifndef _IOA_SCRIPTS_H_INCLUDED_
#define _IOA_SCRIPTS_H_INCLUDED_


#define IOA_HUB_SCRIPTS(H, W)                                                 \
    W(POST, post)                                                             \
    W(REGISTER, register)                                                     \
    W(RETRIEVE, retrieve)                                                     \
    W(QUERY, query)                                                           \
    H(LIST_AGENTS, list_agents)                                               \
    W(TEAMUP_MEMBERS, teamup_members)                                         \
    H(AGENT_ROOMS, agent_rooms)                                               \
    W(ROOM_CREATE, room_create)                                               \
    H(ROOM_RECORD, room_record)                                               \
    H(PRESENCE, presence)                                                     \
    H(GOAL_CANCEL, goal_cancel)                                               \
    H(GOAL_MESSAGE, goal_message)                                             \
    H(POSITION_SAVE, position_save)                                           \
    H(POSITION_LOAD, position_load)                                           \
    H(ROOM_EXPIRE, room_expire)                                               \
    H(ROOM_FORGET, room_forget)                                               \
    H(AGENT_FORGET, agent_forget)                                             \
    H(INDEX_FETCH, index_fetch)                                               \
    H(EMBED_STORE, embed_store)                                               \
    W(VERIFY, verify)                                                         \
    W(GOAL_INDEX, goal_index)                                                 \
    H(GOAL_LIST, goal_list)                                                   \
    H(WORKER_LIST, worker_list)                                               \
    H(LIMIT_LEASE, limit_lease)                                               \
    H(ROOM_ERASE, room_erase)                                                 \
    H(ROOM_GOALS, room_goals)                                                 \
    H(GOAL_FEED_ERASE, goal_feed_erase)                                       \
    H(GOAL_ERASE, goal_erase)                                                 \
    H(CONN_COUNT, conn_count)                                                 \
    H(ROOM_TAIL, room_tail)


#endif /* _IOA_SCRIPTS_H_INCLUDED_ */
